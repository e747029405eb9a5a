#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "io/io_test_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {
namespace {

using ::testing::HasSubstr;
using nvfp4moe::testing::ScratchDir;

std::string slurp(const std::string& path) {
  std::string s;
  EXPECT_TRUE(read_text_file(path, 1 << 20, &s).ok()) << path;
  return s;
}

TEST(IoAtomicFile, CommitReplacesAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  nvfp4moe::testing::write_text(path, "old contents");
  AtomicFile f;
  ASSERT_TRUE(f.open(path).ok());
  ASSERT_TRUE(f.write("new ", 4).ok());
  EXPECT_EQ(slurp(path), "old contents") << "not visible before commit";
  EXPECT_EQ(dir.entries().size(), 2u) << "the temporary sits next to the target";
  ASSERT_TRUE(f.write("data", 4).ok());
  EXPECT_EQ(f.bytes_written(), 8u);
  ASSERT_TRUE(f.commit().ok());
  EXPECT_EQ(slurp(path), "new data");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 0044, 0u) << "readable by others like any written file (umask permitting)";
}

TEST(IoAtomicFile, AbandonKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  nvfp4moe::testing::write_text(path, "old");
  {
    AtomicFile f;
    ASSERT_TRUE(f.open(path).ok());
    ASSERT_TRUE(f.write("partial", 7).ok());
  }  // destroyed without commit
  EXPECT_EQ(slurp(path), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(IoAtomicFile, ErrorsNameThePath) {
  ScratchDir dir;
  AtomicFile f;
  Status s = f.open(dir.file("no/such/dir/x.bin"));
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("no/such/dir/x.bin"));
  EXPECT_EQ(f.write("x", 1).code(), StatusCode::kInternal);
  EXPECT_EQ(f.commit().code(), StatusCode::kInternal);
  EXPECT_EQ(write_file_atomic("", "x", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_file_atomic(dir.path() + "/", "x", 1).code(), StatusCode::kInvalidArgument);
}

TEST(IoReadTextFile, LimitAndMissing) {
  ScratchDir dir;
  nvfp4moe::testing::write_text(dir.file("a.txt"), std::string(100, 'x'));
  std::string s;
  EXPECT_TRUE(read_text_file(dir.file("a.txt"), 100, &s).ok());
  EXPECT_EQ(s.size(), 100u);
  const Status big = read_text_file(dir.file("a.txt"), 99, &s);
  EXPECT_EQ(big.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(big.message(), HasSubstr("size 100 bytes exceeds the limit of 99"));
  EXPECT_EQ(read_text_file(dir.file("b.txt"), 99, &s).code(), StatusCode::kIoError);
  EXPECT_EQ(read_text_file(dir.path(), 99, &s).code(), StatusCode::kIoError) << "a directory";
}

TEST(IoFileBytes, MapsEmptyAndRegularFiles) {
  ScratchDir dir;
  nvfp4moe::testing::write_text(dir.file("empty"), "");
  std::shared_ptr<const FileBytes> b;
  ASSERT_TRUE(FileBytes::map(dir.file("empty"), &b).ok());
  EXPECT_EQ(b->size(), 0u);
  GgufFile g;
  EXPECT_THAT(GgufFile::open(dir.file("empty"), &g).message(), HasSubstr("too short"));
  nvfp4moe::testing::write_text(dir.file("abc"), "abc");
  ASSERT_TRUE(FileBytes::map(dir.file("abc"), &b).ok());
  ASSERT_EQ(b->size(), 3u);
  EXPECT_EQ(b->data()[2], 'c');
  EXPECT_EQ(FileBytes::map(dir.path(), &b).code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace nvfp4moe::io
