// Helpers for unit tests that damage an HDF5 file on purpose (through the HDF5 C API, beside
// rlparity's own writer) to check what the readers say about it.
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

namespace rlp_test {

// Replaces the scalar attribute `name` of `obj` with a variable-length string, as rlparity writes them.
inline void replace_string_attr(hid_t obj, const char* name, const std::string& value) {
  if (H5Aexists(obj, name) > 0) {
    ASSERT_GE(H5Adelete(obj, name), 0);
  }
  const hid_t type = H5Tcopy(H5T_C_S1);
  ASSERT_GE(H5Tset_size(type, H5T_VARIABLE), 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0);
  const char* p = value.c_str();
  EXPECT_GE(H5Awrite(attr, type, &p), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

// Replaces the dataset at `path` (absolute, in file `file`) with a contiguous float64 one of `values`.
inline void replace_f64_dataset(hid_t file, const char* path, const std::vector<double>& values) {
  ASSERT_GE(H5Ldelete(file, path, H5P_DEFAULT), 0);
  const hsize_t dims[1] = {values.size()};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t dset = H5Dcreate2(file, path, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  EXPECT_GE(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(dset);
  H5Sclose(space);
}

}  // namespace rlp_test
