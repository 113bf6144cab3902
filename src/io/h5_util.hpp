// Private helpers over the HDF5 C API for run_file.cpp: RAII ids, error-stack capture, and typed
// 1-D dataset / attribute read-write. Every failure throws H5Failure with a readable message
// (the caller adds the file name). HDF5 (serial build) is not thread-safe: callers hold h5_mutex().
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace rlp::h5 {

struct H5Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::mutex& h5_mutex();

// Turns off HDF5's automatic printing of its error stack (idempotent).
void silence_errors();

// The current HDF5 error stack as one line (outermost call and innermost cause), then clears it.
std::string error_detail();

[[noreturn]] void fail(const std::string& what);

inline hid_t check(hid_t id, const std::string& what) {
  if (id < 0) fail(what);
  return id;
}
inline herr_t check_status(herr_t st, const std::string& what) {
  if (st < 0) fail(what);
  return st;
}

class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  ~Id() { reset(); }
  hid_t get() const { return id_; }
  // Closes now and reports a failure (closing a dataset or file flushes data: disk-full shows here).
  void close(const std::string& what) {
    const hid_t id = id_;
    id_ = -1;
    if (id >= 0 && closer_(id) < 0) fail(what);
  }
  void reset() {
    if (id_ >= 0) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

Id make_id(hid_t id, herr_t (*closer)(hid_t), const std::string& what);

// Object creation property lists with modification-time tracking off (deterministic bytes).
Id group_create_plist();
Id create_group(hid_t loc, const std::string& name, const std::string& what);
Id open_group(hid_t loc, const std::string& name, const std::string& what);
bool link_exists(hid_t loc, const std::string& name);
// Names of the links in a group, sorted by name.
std::vector<std::string> list_links(hid_t group, const std::string& what);
// Names of the attributes of an object, sorted by name.
std::vector<std::string> list_attributes(hid_t obj, const std::string& what);

// Attributes.
void write_attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& what);
void write_attr_scalar(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                       const std::string& what);
bool attr_exists(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& what);
// Reads a numeric scalar attribute converted to mem_type (HDF5 converts integer <-> float).
void read_attr_scalar(hid_t obj, const std::string& name, hid_t mem_type, void* out, const std::string& what);
bool attr_is_numeric(hid_t obj, const std::string& name, const std::string& what);

// 1-D datasets: chunked (at most 65536 elements a chunk) + shuffle + deflate(4) when non-empty,
// contiguous with shape (0,) when empty.
void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                   std::size_t n, std::size_t elem_size, const std::string& what);
void write_string_dataset(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                          const std::string& what);
// Reads a 1-D numeric dataset, converted to mem_type.
template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name, hid_t mem_type, const std::string& what);
std::vector<std::string> read_string_dataset(hid_t loc, const std::string& name, const std::string& what);

// Number of elements of a 1-D numeric dataset (checks rank and type class).
std::size_t dataset_length(hid_t dset, const std::string& what);
// True when the dataset `name` under loc holds strings (false for numeric datasets).
bool dataset_is_string(hid_t loc, const std::string& name, const std::string& what);

// Writes a new HDF5 file atomically: creates `<path>.tmp.<pid>` (no object time tracking, strong
// close degree, deflate required), calls write(file), flushes, closes, fsyncs and renames it to
// `path`, then fsyncs the directory (best effort). On any failure the temporary is removed and
// H5Failure is thrown; nothing appears at `path`. The caller holds h5_mutex() and has checked
// the directory and the overwrite policy.
void write_file_atomic(const std::string& path, const std::function<void(hid_t file)>& write);

// Opens an existing HDF5 file read-only (strong close degree) under h5_mutex() and calls
// read(file). Every failure is an InputError: "cannot read <what> '<path>': no such file | it is a
// directory | <errno text> | not an HDF5 file", or "<what> '<path>': <what read() threw>".
void read_file(const std::string& path, const std::string& what, const std::function<void(hid_t file)>& read);

}  // namespace rlp::h5
