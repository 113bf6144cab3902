// The implementation of the public HDF5 interface (rlparity/io/h5_file.hpp) over the HDF5 C API:
// RAII ids, error-stack capture, typed scalar attributes and 1-D datasets, atomic file writes.
#include "rlparity/io/h5_file.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <type_traits>

#include "rlparity/util/error.hpp"

namespace rlp::h5 {

static_assert(std::is_same_v<hid_t, int64_t>, "Group stores an hid_t as int64_t");

namespace {

// HDF5 (serial build) is not thread-safe: one lock for every file access.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// Turns off HDF5's automatic printing of its error stack (idempotent).
void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

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
  void release() { id_ = -1; }  // ownership passed on
  void reset() {
    if (id_ >= 0) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

Id make_id(hid_t id, herr_t (*closer)(hid_t), const std::string& what) { return Id(check(id, what), closer); }

// Each StoredNumber's HDF5 type in files (little-endian, its own width) and in memory.
struct NumberTypes {
  hid_t file, memory;
};
template <class T>
NumberTypes number_types() {
  if constexpr (std::is_same_v<T, int32_t>)
    return {H5T_STD_I32LE, H5T_NATIVE_INT32};
  else if constexpr (std::is_same_v<T, int64_t>)
    return {H5T_STD_I64LE, H5T_NATIVE_INT64};
  else if constexpr (std::is_same_v<T, uint64_t>)
    return {H5T_STD_U64LE, H5T_NATIVE_UINT64};
  else if constexpr (std::is_same_v<T, float>)
    return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
  else
    return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
}

herr_t walk_cb(unsigned n, const H5E_error2_t* err, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  (void)n;
  std::string s;
  if (err->func_name) s += err->func_name;
  if (err->desc && *err->desc) {
    if (!s.empty()) s += ": ";
    s += err->desc;
  }
  lines->push_back(std::move(s));
  return 0;
}

Id vlen_string_type() {
  Id t = make_id(H5Tcopy(H5T_C_S1), H5Tclose, "copy string type");
  check_status(H5Tset_size(t.get(), H5T_VARIABLE), "set variable string size");
  check_status(H5Tset_cset(t.get(), H5T_CSET_UTF8), "set string charset");
  return t;
}

herr_t reclaim(hid_t type, hid_t space, void* buf) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Treclaim(type, space, H5P_DEFAULT, buf);
#else
  return H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf);
#endif
}

herr_t attr_name_cb(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

// The sec2 driver's descriptions carry a timestamp, buffer address and offsets; keep the errno part.
std::string shorten(const std::string& desc) {
  const std::size_t e = desc.find("errno = ");
  if (e == std::string::npos) return desc;
  const std::size_t head = desc.find(':');
  std::string out = head != std::string::npos && head < e ? desc.substr(0, head) : std::string();
  std::size_t end = desc.find(", buf =", e);
  if (end == std::string::npos) end = desc.size();
  out += (out.empty() ? "" : ": ") + desc.substr(e, end - e);
  return out;
}

std::string error_detail() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "";
  if (lines.size() == 1) return shorten(lines.front());
  return lines.front() + " (cause: " + shorten(lines.back()) + ")";
}

void fail(const std::string& what) {
  const std::string detail = error_detail();
  throw H5Failure(detail.empty() ? what : what + ": " + detail);
}

Id group_create_plist() {
  Id p = make_id(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "create group property list");
  check_status(H5Pset_obj_track_times(p.get(), false), "disable group time tracking");
  return p;
}

Id create_group(hid_t loc, const std::string& name, const std::string& what) {
  Id gcpl = group_create_plist();
  return make_id(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                 "create group " + what);
}

Id open_group(hid_t loc, const std::string& name, const std::string& what) {
  return make_id(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose, "open group " + what);
}

bool link_exists(hid_t loc, const std::string& name) {
  const htri_t r = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::vector<std::string> list_links(hid_t group, const std::string& what) {
  H5G_info_t info;
  check_status(H5Gget_info(group, &info), "list " + what);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) fail("list " + what);
    std::string name(static_cast<std::size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) <
        0)
      fail("list " + what);
    name.resize(static_cast<std::size_t>(len));
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> list_attributes(hid_t obj, const std::string& what) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  check_status(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_name_cb, &names),
               "list attributes of " + what);
  std::sort(names.begin(), names.end());
  return names;
}

void write_attr_string(hid_t obj, const std::string& name, const std::string& value,
                       const std::string& what) {
  if (value.find('\0') != std::string::npos)
    throw H5Failure("attribute " + what + " contains a NUL character");
  Id type = vlen_string_type();
  Id space = make_id(H5Screate(H5S_SCALAR), H5Sclose, "create scalar dataspace");
  Id attr = make_id(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose, "create attribute " + what);
  const char* p = value.c_str();
  check_status(H5Awrite(attr.get(), type.get(), &p), "write attribute " + what);
  attr.close("close attribute " + what);
}

void write_attr_scalar(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                       const std::string& what) {
  Id space = make_id(H5Screate(H5S_SCALAR), H5Sclose, "create scalar dataspace");
  Id attr = make_id(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                    "create attribute " + what);
  check_status(H5Awrite(attr.get(), mem_type, value), "write attribute " + what);
  attr.close("close attribute " + what);
}

bool attr_exists(hid_t obj, const std::string& name) {
  const htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

void require_single(hid_t space, const std::string& what) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n != 1) throw H5Failure(what + " is not a single value");
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& what) {
  if (!attr_exists(obj, name)) throw H5Failure("missing attribute " + what);
  Id attr = make_id(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + what);
  Id ftype = make_id(H5Aget_type(attr.get()), H5Tclose, "type of attribute " + what);
  if (H5Tget_class(ftype.get()) != H5T_STRING) throw H5Failure("attribute " + what + " is not a string");
  Id space = make_id(H5Aget_space(attr.get()), H5Sclose, "dataspace of attribute " + what);
  require_single(space.get(), "attribute " + what);
  const htri_t is_var = H5Tis_variable_str(ftype.get());
  if (is_var < 0) fail("type of attribute " + what);
  if (is_var > 0) {
    Id mtype = vlen_string_type();
    char* p = nullptr;
    check_status(H5Aread(attr.get(), mtype.get(), &p), "read attribute " + what);
    std::string out = p ? p : "";
    reclaim(mtype.get(), space.get(), &p);
    return out;
  }
  const std::size_t size = H5Tget_size(ftype.get());
  Id mtype = make_id(H5Tcopy(H5T_C_S1), H5Tclose, "copy string type");
  check_status(H5Tset_size(mtype.get(), size), "set string size");
  std::string buf(size, '\0');
  check_status(H5Aread(attr.get(), mtype.get(), buf.data()), "read attribute " + what);
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

bool attr_is_numeric(hid_t obj, const std::string& name, const std::string& what) {
  Id attr = make_id(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + what);
  Id ftype = make_id(H5Aget_type(attr.get()), H5Tclose, "type of attribute " + what);
  const H5T_class_t c = H5Tget_class(ftype.get());
  return c == H5T_INTEGER || c == H5T_FLOAT;
}

void read_attr_scalar(hid_t obj, const std::string& name, hid_t mem_type, void* out,
                      const std::string& what) {
  if (!attr_exists(obj, name)) throw H5Failure("missing attribute " + what);
  if (!attr_is_numeric(obj, name, what)) throw H5Failure("attribute " + what + " is not a number");
  Id attr = make_id(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + what);
  Id space = make_id(H5Aget_space(attr.get()), H5Sclose, "dataspace of attribute " + what);
  require_single(space.get(), "attribute " + what);
  check_status(H5Aread(attr.get(), mem_type, out), "read attribute " + what);
}

// A dataset of shape `dims` (row-major; empty dims: 1-D of n). Chunks span whole trailing rows,
// at most 65536 elements where the trailing dimensions allow.
std::vector<hsize_t> shape_of(std::size_t n, const std::vector<uint64_t>& dims, const std::string& what) {
  if (dims.empty()) return {static_cast<hsize_t>(n)};
  uint64_t total = 1;
  for (uint64_t d : dims) total *= d;
  if (total != n) throw H5Failure(what + ": shape does not match the number of values");
  return {dims.begin(), dims.end()};
}
Id dataspace_of(const std::vector<hsize_t>& dims) {
  return make_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), dims.data()), H5Sclose,
                 "create dataspace");
}
std::vector<hsize_t> chunk_of(const std::vector<hsize_t>& dims) {
  std::vector<hsize_t> chunk(dims);
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    hsize_t rest = 1;
    for (std::size_t j = i + 1; j < chunk.size(); ++j) rest *= chunk[j];
    chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(chunk[i], 65536 / std::max<hsize_t>(rest, 1)));
  }
  return chunk;
}

void write_numeric_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                           const void* data, std::size_t n, const std::string& what,
                           const std::vector<uint64_t>& shape = {}) {
  const std::vector<hsize_t> dims = shape_of(n, shape, what);
  Id space = dataspace_of(dims);
  Id dcpl = make_id(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "create dataset property list");
  check_status(H5Pset_obj_track_times(dcpl.get(), false), "disable dataset time tracking");
  if (n > 0) {
    const std::vector<hsize_t> chunk = chunk_of(dims);
    check_status(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()),
                 "set chunking of " + what);
    check_status(H5Pset_shuffle(dcpl.get()), "set shuffle filter of " + what);
    check_status(H5Pset_deflate(dcpl.get(), 4), "set deflate filter of " + what);
    check_status(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "set fill time of " + what);
  }
  Id dset =
      make_id(H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose, "create dataset " + what);
  if (n > 0)
    check_status(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                 "write dataset " + what);
  dset.close("close dataset " + what);
}

void write_string_dataset(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                          const std::string& what, const std::vector<uint64_t>& shape = {}) {
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) {
    if (v.find('\0') != std::string::npos) throw H5Failure(what + " holds a string with a NUL character");
    ptrs.push_back(v.c_str());
  }
  Id type = vlen_string_type();
  Id space = dataspace_of(shape_of(values.size(), shape, what));
  Id dcpl = make_id(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "create dataset property list");
  check_status(H5Pset_obj_track_times(dcpl.get(), false), "disable dataset time tracking");
  Id dset =
      make_id(H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose, "create dataset " + what);
  if (!values.empty())
    check_status(H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
                 "write dataset " + what);
  dset.close("close dataset " + what);
}

// The dataset's shape; `rank` > 0 requires that rank. A damaged or hostile file can declare any
// size; one its bytes cannot hold is refused before anything is allocated for it. Deflate expands
// at most ~1032:1, so a real dataset's elements never need more than 1100x the file's size (plus
// slack for fill-valued tiny datasets).
std::vector<uint64_t> dataset_shape(hid_t dset, const std::string& what, int rank) {
  Id space = make_id(H5Dget_space(dset), H5Sclose, "dataspace of " + what);
  const int r = H5Sget_simple_extent_ndims(space.get());
  if (r < 1 || r > 8 || (rank > 0 && r != rank))
    throw H5Failure(what + (rank == 1 ? std::string(" is not one-dimensional") : " has the wrong rank") +
                    " (rank " + std::to_string(r) + ")");
  std::vector<hsize_t> dims(static_cast<std::size_t>(r), 0);
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "shape of " + what);
  Id file = make_id(H5Iget_file_id(dset), H5Fclose, "file of " + what);
  Id ftype = make_id(H5Dget_type(dset), H5Tclose, "type of " + what);
  hsize_t file_bytes = 0;
  check_status(H5Fget_filesize(file.get(), &file_bytes), "size of the file holding " + what);
  double elems = 1.0;
  for (hsize_t d : dims) elems *= static_cast<double>(d);
  const double elem = static_cast<double>(std::max<std::size_t>(H5Tget_size(ftype.get()), 1));
  const double limit = 1100.0 * static_cast<double>(file_bytes) + 1048576.0;
  if (elems * elem > limit)
    throw H5Failure(what + " declares " + fmt::format("{:.0f}", elems) + " elements, more than the file's " +
                    std::to_string(file_bytes) + " bytes can hold (damaged file?)");
  return std::vector<uint64_t>(dims.begin(), dims.end());
}

std::size_t dataset_length(hid_t dset, const std::string& what) {
  return static_cast<std::size_t>(dataset_shape(dset, what, 1)[0]);
}

// The elements to read: with `shape`, any rank (the shape returned there), else a 1-D length.
std::size_t element_count(hid_t dset, const std::string& what, std::vector<uint64_t>* shape) {
  if (!shape) return dataset_length(dset, what);
  *shape = dataset_shape(dset, what, 0);
  std::size_t n = 1;
  for (uint64_t d : *shape) n *= static_cast<std::size_t>(d);
  return n;
}

template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name, hid_t mem_type, const std::string& what,
                            std::vector<uint64_t>* shape = nullptr) {
  if (!link_exists(loc, name)) throw H5Failure("missing dataset " + what);
  Id dset = make_id(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + what);
  Id ftype = make_id(H5Dget_type(dset.get()), H5Tclose, "type of " + what);
  const H5T_class_t c = H5Tget_class(ftype.get());
  if (c != H5T_INTEGER && c != H5T_FLOAT) throw H5Failure(what + " is not numeric");
  const std::size_t n = element_count(dset.get(), what, shape);
  std::vector<T> out(n);
  if (n > 0)
    check_status(H5Dread(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                 "read dataset " + what);
  return out;
}

std::vector<std::string> read_string_dataset(hid_t loc, const std::string& name, const std::string& what,
                                             std::vector<uint64_t>* shape = nullptr) {
  if (!link_exists(loc, name)) throw H5Failure("missing dataset " + what);
  Id dset = make_id(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + what);
  Id ftype = make_id(H5Dget_type(dset.get()), H5Tclose, "type of " + what);
  if (H5Tget_class(ftype.get()) != H5T_STRING) throw H5Failure(what + " is not a string dataset");
  const std::size_t n = element_count(dset.get(), what, shape);
  std::vector<std::string> out;
  out.reserve(n);
  if (n == 0) return out;
  Id space = make_id(H5Dget_space(dset.get()), H5Sclose, "dataspace of " + what);
  const htri_t is_var = H5Tis_variable_str(ftype.get());
  if (is_var < 0) fail("type of " + what);
  if (is_var > 0) {
    Id mtype = vlen_string_type();
    std::vector<char*> ptrs(n, nullptr);
    check_status(H5Dread(dset.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
                 "read dataset " + what);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    reclaim(mtype.get(), space.get(), ptrs.data());
    return out;
  }
  const std::size_t size = H5Tget_size(ftype.get());
  Id mtype = make_id(H5Tcopy(H5T_C_S1), H5Tclose, "copy string type");
  check_status(H5Tset_size(mtype.get(), size), "set string size");
  std::vector<char> buf(n * size + 1, '\0');
  check_status(H5Dread(dset.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()),
               "read dataset " + what);
  for (std::size_t i = 0; i < n; ++i) {
    const char* p = buf.data() + i * size;
    out.emplace_back(p, strnlen(p, size));
  }
  return out;
}

bool dataset_is_string(hid_t loc, const std::string& name, const std::string& what) {
  if (!link_exists(loc, name)) throw H5Failure("missing dataset " + what);
  Id dset = make_id(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + what);
  Id ftype = make_id(H5Dget_type(dset.get()), H5Tclose, "type of " + what);
  return H5Tget_class(ftype.get()) == H5T_STRING;
}

void fsync_path(const std::string& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw H5Failure("cannot open '" + p + "' to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw H5Failure("fsync of '" + p + "' failed: " + std::strerror(err));
}

void create_file_atomic(const std::string& path, const std::function<void(hid_t file)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  silence_errors();
  try {
    {
      Id fcpl = make_id(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "create file property list");
      if (H5Pset_obj_track_times(fcpl.get(), false) < 0)
        H5Eclear2(H5E_DEFAULT);  // root group times, best effort
      Id fapl = make_id(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "create file access property list");
      check_status(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "set file close degree");
      if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
        throw H5Failure("the HDF5 library lacks the deflate filter");
      Id file = make_id(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose,
                        "create temporary file '" + tmp + "'");
      write(file.get());
      check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "flush file");
      file.close("close file");
    }
    fsync_path(tmp, false);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw H5Failure("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    H5Eclear2(H5E_DEFAULT);
    throw;
  }
  const std::filesystem::path p(path);
  try {
    fsync_path(p.has_parent_path() ? p.parent_path().string() : std::string("."),
               true);  // durability of the rename
  } catch (const H5Failure&) {
  }
}

}  // namespace

// Groups hand out their hid_t only inside this file.
struct GroupAccess {
  static Group root(hid_t file) { return Group(file, "", false); }
  static Group owned(Id id, std::string path) {
    const hid_t raw = id.get();
    id.release();
    return Group(raw, std::move(path), true);
  }
};

Group::Group(Group&& other) noexcept : id_(other.id_), path_(std::move(other.path_)), owned_(other.owned_) {
  other.id_ = -1;
}

Group& Group::operator=(Group&& other) noexcept {
  if (this != &other) {
    if (owned_ && id_ >= 0) H5Gclose(id_);
    id_ = other.id_;
    path_ = std::move(other.path_);
    owned_ = other.owned_;
    other.id_ = -1;
  }
  return *this;
}

Group::~Group() {
  if (owned_ && id_ >= 0) H5Gclose(id_);
}

void Group::close() {
  const hid_t id = id_;
  id_ = -1;
  if (owned_ && id >= 0 && H5Gclose(id) < 0) fail("close group " + path_);
}

Group Group::create_group(const std::string& name) {
  return GroupAccess::owned(h5::create_group(id_, name, child(name)), child(name));
}
void Group::write_attr_string(const std::string& name, const std::string& value) {
  h5::write_attr_string(id_, name, value, child(name));
}
template <StoredNumber T>
void Group::write_attr(const std::string& name, std::type_identity_t<T> value) {
  const NumberTypes t = number_types<T>();
  write_attr_scalar(id_, name, t.file, t.memory, &value, child(name));
}
template <StoredNumber T>
void Group::write_dataset(const std::string& name, const std::vector<T>& values) {
  const NumberTypes t = number_types<T>();
  write_numeric_dataset(id_, name, t.file, t.memory, values.data(), values.size(), child(name));
}
void Group::write_dataset(const std::string& name, const std::vector<std::string>& values) {
  write_string_dataset(id_, name, values, child(name));
}
template <StoredNumber T>
void Group::write_dataset(const std::string& name, const std::vector<T>& values,
                          const std::vector<uint64_t>& shape) {
  const NumberTypes t = number_types<T>();
  write_numeric_dataset(id_, name, t.file, t.memory, values.data(), values.size(), child(name), shape);
}
void Group::write_dataset(const std::string& name, const std::vector<std::string>& values,
                          const std::vector<uint64_t>& shape) {
  write_string_dataset(id_, name, values, child(name), shape);
}

Group Group::open_group(const std::string& name) const {
  return GroupAccess::owned(h5::open_group(id_, name, child(name)), child(name));
}
bool Group::has_link(const std::string& name) const { return link_exists(id_, name); }
std::vector<std::string> Group::links() const { return list_links(id_, path_); }
bool Group::has_attr(const std::string& name) const { return attr_exists(id_, name); }
std::vector<std::string> Group::attributes() const { return list_attributes(id_, path_); }
bool Group::attr_is_numeric(const std::string& name) const {
  return h5::attr_is_numeric(id_, name, child(name));
}
std::string Group::read_attr_string(const std::string& name) const {
  return h5::read_attr_string(id_, name, child(name));
}
template <StoredNumber T>
T Group::read_attr(const std::string& name) const {
  T v{};
  read_attr_scalar(id_, name, number_types<T>().memory, &v, child(name));
  return v;
}
template <StoredNumber T>
std::vector<T> Group::read_dataset(const std::string& name) const {
  return h5::read_dataset<T>(id_, name, number_types<T>().memory, child(name));
}
template <StoredNumber T>
std::vector<T> Group::read_dataset(const std::string& name, std::vector<uint64_t>& shape) const {
  return h5::read_dataset<T>(id_, name, number_types<T>().memory, child(name), &shape);
}
std::vector<std::string> Group::read_string_dataset(const std::string& name) const {
  return h5::read_string_dataset(id_, name, child(name));
}
std::vector<std::string> Group::read_string_dataset(const std::string& name,
                                                    std::vector<uint64_t>& shape) const {
  return h5::read_string_dataset(id_, name, child(name), &shape);
}
bool Group::dataset_is_string(const std::string& name) const {
  return h5::dataset_is_string(id_, name, child(name));
}

// Every StoredNumber, instantiated once here (the templates need the HDF5 types).
#define RLP_H5_STORED_NUMBER(T)                                                     \
  template void Group::write_attr<T>(const std::string&, T);                        \
  template void Group::write_dataset<T>(const std::string&, const std::vector<T>&); \
  template void Group::write_dataset<T>(const std::string&, const std::vector<T>&,  \
                                        const std::vector<uint64_t>&);              \
  template T Group::read_attr<T>(const std::string&) const;                         \
  template std::vector<T> Group::read_dataset<T>(const std::string&) const;         \
  template std::vector<T> Group::read_dataset<T>(const std::string&, std::vector<uint64_t>&) const;
RLP_H5_STORED_NUMBER(int32_t)
RLP_H5_STORED_NUMBER(int64_t)
RLP_H5_STORED_NUMBER(uint64_t)
RLP_H5_STORED_NUMBER(float)
RLP_H5_STORED_NUMBER(double)
#undef RLP_H5_STORED_NUMBER

void write_file_atomic(const std::string& path, const std::string& what,
                       const std::function<void(Group& root)>& write) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  try {
    create_file_atomic(path, [&](hid_t file) {
      Group root = GroupAccess::root(file);
      write(root);
    });
  } catch (const std::exception& e) {
    RLP_THROW_INPUT("cannot write {} '{}': {}", what, path, e.what());
  }
}

void read_file(const std::string& path, const std::string& what,
               const std::function<void(Group& root)>& read) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) RLP_THROW_INPUT("cannot read {} '{}': no such file", what, path);
  if (fs::is_directory(path, ec)) RLP_THROW_INPUT("cannot read {} '{}': it is a directory", what, path);
  if (::access(path.c_str(), R_OK) != 0)
    RLP_THROW_INPUT("cannot read {} '{}': {}", what, path, std::strerror(errno));
  std::lock_guard<std::mutex> lock(h5_mutex());
  silence_errors();
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    RLP_THROW_INPUT("cannot read {} '{}': not an HDF5 file", what, path);
  }
  try {
    Id fapl = make_id(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "create file access property list");
    check_status(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "set file close degree");
    Id file = make_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "open file");
    Group root = GroupAccess::root(file.get());
    read(root);
    file.close("close file");
  } catch (const std::exception& e) {
    H5Eclear2(H5E_DEFAULT);
    RLP_THROW_INPUT("{} '{}': {}", what, path, e.what());
  }
}

}  // namespace rlp::h5
