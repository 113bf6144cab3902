// The io layer's HDF5 interface (rlparity/io/h5_file.hpp): every stored type reads back as written,
// at the width asked for, and errors name the object's path and the file.
#include "rlparity/io/h5_file.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "unit/scratch_test_util.hpp"

namespace {

using rlp::h5::Group;

class H5FileTest : public rlp_test::ScratchDirTest {};

TEST_F(H5FileTest, RoundTripOfEveryStoredType) {
  const std::string path = (dir_ / "x.h5").string();
  rlp::h5::write_file_atomic(path, "test file", [](Group& root) {
    root.write_attr_string("s", "text");
    root.write_attr<int32_t>("i32", -7);
    root.write_attr<int64_t>("i64", int64_t{1} << 40);
    root.write_attr<uint64_t>("u64", std::numeric_limits<uint64_t>::max());
    root.write_attr<double>("f64", 0.1);
    Group g = root.create_group("g");
    EXPECT_EQ(g.path(), "/g");
    g.write_dataset("d", std::vector<double>{1.5, -2.0});
    g.write_dataset("i", std::vector<int32_t>{3, 4, 5});
    g.write_dataset("l", std::vector<int64_t>{});
    g.write_dataset("names", std::vector<std::string>{"a", "bc"});
    g.close();
  });
  rlp::h5::read_file(path, "test file", [](Group& root) {
    EXPECT_EQ(root.read_attr_string("s"), "text");
    EXPECT_EQ(root.read_attr<int32_t>("i32"), -7);
    EXPECT_EQ(root.read_attr<int64_t>("i64"), int64_t{1} << 40);
    EXPECT_EQ(root.read_attr<uint64_t>("u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(root.read_attr<double>("f64"), 0.1);
    EXPECT_EQ(root.read_attr<int64_t>("i32"), -7);  // converted to the width asked for
    EXPECT_TRUE(root.attr_is_numeric("i32"));
    EXPECT_FALSE(root.attr_is_numeric("s"));
    EXPECT_EQ(root.attributes(), (std::vector<std::string>{"f64", "i32", "i64", "s", "u64"}));
    ASSERT_TRUE(root.has_link("g"));
    const Group g = root.open_group("g");
    EXPECT_EQ(g.links(), (std::vector<std::string>{"d", "i", "l", "names"}));
    EXPECT_EQ(g.read_dataset<double>("d"), (std::vector<double>{1.5, -2.0}));
    EXPECT_EQ(g.read_dataset<int32_t>("i"), (std::vector<int32_t>{3, 4, 5}));
    EXPECT_TRUE(g.read_dataset<int64_t>("l").empty());
    EXPECT_EQ(g.read_string_dataset("names"), (std::vector<std::string>{"a", "bc"}));
    EXPECT_TRUE(g.dataset_is_string("names"));
    EXPECT_FALSE(g.dataset_is_string("d"));
  });
}

TEST_F(H5FileTest, ErrorsNameTheObjectAndTheFile) {
  const std::string path = (dir_ / "x.h5").string();
  rlp::h5::write_file_atomic(path, "test file", [](Group& root) { root.create_group("g").close(); });
  const std::string msg = input_error([&] {
    rlp::h5::read_file(path, "test file", [](Group& root) { root.open_group("g").read_attr<double>("a"); });
  });
  EXPECT_NE(msg.find("test file '" + path + "': missing attribute /g/a"), std::string::npos) << msg;
  // A failing writer leaves nothing behind.
  const std::string bad = (dir_ / "bad.h5").string();
  const std::string wmsg = input_error([&] {
    rlp::h5::write_file_atomic(bad, "test file",
                               [](Group& root) { root.write_attr_string("s", std::string("a\0b", 3)); });
  });
  EXPECT_NE(wmsg.find("cannot write test file '" + bad + "'"), std::string::npos) << wmsg;
  EXPECT_FALSE(std::filesystem::exists(bad));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()),
            1);
}

}  // namespace
