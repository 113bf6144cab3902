// The io layer's HDF5 access, for every file rlparity writes or reads (run files, inspect files):
// RAII groups that know their path (every error message names the object: "/recipes/bf16/tokens/x"),
// typed scalar attributes and 1-D datasets, and whole-file atomic writes. Written files are
// deterministic: no object times, fixed chunking and filters (docs/hdf5-schema.md). HDF5 (serial
// build) is not thread-safe: write_file_atomic and read_file hold one process-wide lock, so Groups
// are only used inside their callbacks.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rlp::h5 {

// Every HDF5 failure, with the library's own reason; write_file_atomic / read_file turn it into an
// InputError that names the file.
struct H5Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The number types attributes and datasets hold, each stored little-endian in its own width.
template <class T>
concept StoredNumber = std::same_as<T, int32_t> || std::same_as<T, int64_t> || std::same_as<T, uint64_t> ||
    std::same_as<T, float> || std::same_as<T, double>;

// A group (or the file's root group) open for writing or reading. Closed on destruction; close()
// closes it now and reports a failure. Attribute and dataset names are single link names.
class Group {
 public:
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  Group(Group&& other) noexcept;
  Group& operator=(Group&& other) noexcept;
  ~Group();

  // The object's path in the file ("" for the root; children are path() + "/" + name).
  const std::string& path() const { return path_; }
  void close();

  // Writing. Attributes are scalars: strings as variable-length UTF-8, numbers little-endian in the
  // stated width. Datasets are 1-D: chunked (at most 65536 elements a chunk) + shuffle + deflate(4)
  // when non-empty, contiguous with shape (0,) when empty; strings variable-length UTF-8.
  Group create_group(const std::string& name);
  void write_attr_string(const std::string& name, const std::string& value);
  // The width is always spelled out (write_attr<int64_t>("layer", layer)): no deduction from the
  // argument's type decides what lands in the file.
  template <StoredNumber T>
  void write_attr(const std::string& name, std::type_identity_t<T> value);
  template <StoredNumber T>
  void write_dataset(const std::string& name, const std::vector<T>& values);
  void write_dataset(const std::string& name, const std::vector<std::string>& values);
  // N-dimensional, row-major, of `shape` (its product must be values.size(); chunks hold whole
  // trailing rows up to 65536 elements). read_dataset(name, shape) reads them back.
  template <StoredNumber T>
  void write_dataset(const std::string& name, const std::vector<T>& values,
                     const std::vector<uint64_t>& shape);
  void write_dataset(const std::string& name, const std::vector<std::string>& values,
                     const std::vector<uint64_t>& shape);

  // Reading. Numeric attributes and datasets are converted to the requested type (HDF5 converts
  // integer <-> float); a missing object, a wrong type class or shape is an H5Failure.
  Group open_group(const std::string& name) const;
  bool has_link(const std::string& name) const;
  std::vector<std::string> links() const;  // sorted by name
  bool has_attr(const std::string& name) const;
  std::vector<std::string> attributes() const;  // sorted by name
  bool attr_is_numeric(const std::string& name) const;
  std::string read_attr_string(const std::string& name) const;
  template <StoredNumber T>
  T read_attr(const std::string& name) const;
  template <StoredNumber T>
  std::vector<T> read_dataset(const std::string& name) const;  // 1-D only
  // Any rank: the values row-major, the shape into `shape`.
  template <StoredNumber T>
  std::vector<T> read_dataset(const std::string& name, std::vector<uint64_t>& shape) const;
  std::vector<std::string> read_string_dataset(const std::string& name) const;  // 1-D only
  std::vector<std::string> read_string_dataset(const std::string& name, std::vector<uint64_t>& shape) const;
  bool dataset_is_string(const std::string& name) const;

 private:
  friend struct GroupAccess;
  Group(int64_t id, std::string path, bool owned) : id_(id), path_(std::move(path)), owned_(owned) {}
  std::string child(const std::string& name) const { return path_ + "/" + name; }
  int64_t id_ = -1;  // the HDF5 hid_t
  std::string path_;
  bool owned_ = true;  // false for the root, which the file closes
};

// Writes a new HDF5 file atomically: creates `<path>.tmp.<pid>` (no object time tracking, strong
// close degree, deflate required), calls write(root), flushes, closes, fsyncs and renames it to
// `path`, then fsyncs the directory (best effort). On any failure the temporary is removed, nothing
// appears at `path`, and an InputError "cannot write <what> '<path>': <reason>" is thrown. The
// caller has checked the directory and the overwrite policy.
void write_file_atomic(const std::string& path, const std::string& what,
                       const std::function<void(Group& root)>& write);

// Opens an existing HDF5 file read-only (strong close degree) and calls read(root). Every failure is
// an InputError: "cannot read <what> '<path>': no such file | it is a directory | <errno text> | not
// an HDF5 file", or "<what> '<path>': <what read() threw>".
void read_file(const std::string& path, const std::string& what,
               const std::function<void(Group& root)>& read);

}  // namespace rlp::h5
