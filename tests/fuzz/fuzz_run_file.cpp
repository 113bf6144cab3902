// libFuzzer target: our HDF5 run-file reader (read_run_file) on files we did not write. The fuzz
// input is written to a scratch file and opened through the HDF5 library. The HDF5 C library is not
// instrumented; crashes inside it on corrupt files are HDF5 bugs, not ours (docs/robustness.md says
// how tools/fuzz.sh treats them).
#include <hdf5.h>

#include <cstdint>

#include "fuzz_util.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = rlp::fuzz::write_input("run.h5", data, size);
  try {
    (void)rlp::read_run_file(path);
  } catch (const rlp::Error&) {
  }
  return 0;
}
