// Memory-mapped reading and atomic writing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <new>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {

using detail::errno_text;

namespace {

Status io_error(const std::string& path, const char* what, int err) {
  return make_status(StatusCode::kIoError, path, ": ", what, ": ", errno_text(err));
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

FileBytes::~FileBytes() {
  if (mapping_) ::munmap(mapping_, size_);
}

Status FileBytes::map(const std::string& path, std::shared_ptr<const FileBytes>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open", errno);
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return io_error(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return make_status(StatusCode::kIoError, path, ": not a regular file");
  std::shared_ptr<FileBytes> bytes(new (std::nothrow) FileBytes());
  if (!bytes) return make_status(StatusCode::kOutOfMemory, path, ": out of memory");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return io_error(path, "cannot mmap", errno);
    bytes->mapping_ = p;
    bytes->data_ = static_cast<const uint8_t*>(p);
    bytes->size_ = static_cast<size_t>(size);
  }
  *out = std::move(bytes);
  return ok_status();
}

std::shared_ptr<const FileBytes> FileBytes::copy_of(const void* data, size_t size) {
  std::shared_ptr<FileBytes> bytes(new FileBytes());
  const auto* b = static_cast<const uint8_t*>(data);
  if (size > 0) bytes->copy_.assign(b, b + size);
  bytes->data_ = bytes->copy_.data();
  bytes->size_ = size;
  return bytes;
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

Status AtomicFile::open(const std::string& path) {
  abandon();
  if (path.empty()) return invalid_argument("output path is empty");
  path_ = path;
  written_ = 0;
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return invalid_argument("output path ", detail::quote_untrusted(path), " names a directory");
  // The temporary lives in the destination's directory so that rename() stays
  // within one file system and is atomic.
  std::string tmpl = parent_dir(path) + "/." + base + ".tmp.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) return io_error(path, "cannot create a temporary file next to it", errno);
  fd_ = fd;
  temp_path_ = buf.data();
  // mkstemp makes 0600; a written model should be readable like other files.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  return ok_status();
}

Status AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) return make_status(StatusCode::kInternal, "AtomicFile::write on a file that is not open");
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      abandon();
      return io_error(path_, "write failed", err);
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  return ok_status();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return make_status(StatusCode::kInternal, "AtomicFile::commit on a file that is not open");
  if (::fsync(fd_) != 0) {
    const int err = errno;
    abandon();
    return io_error(path_, "fsync failed", err);
  }
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    abandon();
    return io_error(path_, "close failed", err);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abandon();
    return io_error(path_, "cannot rename the temporary file over it", err);
  }
  temp_path_.clear();
  // The rename is durable only once the directory entry is.
  const int dir_fd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return ok_status();
}

Status write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicFile file;
  NVFP4MOE_RETURN_IF_ERROR(file.open(path));
  NVFP4MOE_RETURN_IF_ERROR(file.write(data, size));
  return file.commit();
}

Status read_text_file(const std::string& path, uint64_t max_bytes, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open", errno);
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return io_error(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return make_status(StatusCode::kIoError, path, ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return make_status(StatusCode::kOutOfRange, path, ": size ", st.st_size, " bytes exceeds the limit of ",
                       max_bytes);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');  // *out is only written on success
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(path, "read failed", errno);
    }
    if (n == 0) break;  // the file shrank meanwhile
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  *out = std::move(text);
  return ok_status();
}

}  // namespace nvfp4moe::io
