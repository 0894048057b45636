#include "tiers/l3_index.h"

#include <dirent.h>
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "tiers/disk_space.h"

namespace kvtier::tiers {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

// RocksDB's info log, kept by us: RocksDB's own asserts (and so aborts the
// daemon) on the line after one it failed to write, which a full disk
// makes certain. One write(2) a line, failures ignored; appended across
// reopens (a reopen after a failure keeps its story) and started afresh
// once past kMaxBytes.
class IndexLogger final : public rocksdb::Logger {
 public:
  explicit IndexLogger(const std::string& path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL),
        fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0) written_ = st.st_size;
    if (written_ >= kMaxBytes && ::ftruncate(fd_, 0) == 0) written_ = 0;
  }
  ~IndexLogger() override {
    if (fd_ >= 0) ::close(fd_);
  }
  IndexLogger(const IndexLogger&) = delete;
  IndexLogger& operator=(const IndexLogger&) = delete;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0 || written_.load() >= kMaxBytes) return;
    char line[1024];
    const int n = std::vsnprintf(line, sizeof line - 1, format, ap);
    if (n < 0) return;
    std::size_t length = std::min(static_cast<std::size_t>(n), sizeof line - 2);
    line[length++] = '\n';
    const ssize_t w = ::write(fd_, line, length);
    if (w > 0) written_ += w;
  }

 private:
  static constexpr long kMaxBytes = 1 << 20;
  const int fd_;
  std::atomic<long> written_{0};
};

// RocksDB's own recovery from a background error (a full disk) stays off:
// with an empty memtable it resumes onto the write-ahead log that failed,
// and the next write aborts. L3Index::recover() reopens instead.
class NoAutoRecovery final : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "kvtier.NoAutoRecovery"; }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

rocksdb::Options db_options(std::shared_ptr<rocksdb::Logger> logger) {
  rocksdb::Options options;
  options.create_if_missing = true;
  // The index is small (about 200 bytes an entry), but every write, use and
  // erase appends to the memtable, which only a flush empties: a small one
  // keeps the daemon's memory flat under a steady load (a soak showed an
  // 8 MiB one growing the RSS by 3.7 MiB in 10 minutes).
  options.write_buffer_size = 1 << 20;
  options.max_write_buffer_number = 2;
  options.max_open_files = 256;
  // Its warnings go to our logger (see IndexLogger), and a failure stays
  // failed until L3Index::recover() (see NoAutoRecovery; the retries of
  // retryable errors stop too).
  options.info_log = std::move(logger);
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.listeners.push_back(std::make_shared<NoAutoRecovery>());
  options.max_bgerror_resume_count = 0;
  // Files take the space they hold and no more: preallocation would set 4 MiB
  // aside for a MANIFEST of a few kilobytes and 1.1 MiB for each log, which
  // the headroom L3Store keeps would have to cover; a MANIFEST is rewritten
  // once it reaches 1 MiB.
  options.allow_fallocate = false;
  options.max_manifest_file_size = 1 << 20;
  return options;
}

// A logger that writes nowhere, for DestroyDB (whose own would create a LOG).
std::shared_ptr<rocksdb::Logger> no_logger() { return std::make_shared<IndexLogger>(""); }

std::expected<std::unique_ptr<rocksdb::DB>, rocksdb::Status> open_db(const std::string& dir) {
  // The directory first, so that the logger can create its file; an error
  // here is DB::Open's to report.
  ::mkdir(dir.c_str(), 0755);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options(std::make_shared<IndexLogger>(dir + "/LOG")), dir, &raw);
  if (!s.ok()) return std::unexpected(s);
  return std::unique_ptr<rocksdb::DB>(raw);
}

std::expected<void, std::string> check_room(const std::string& dir, std::uint64_t min_free) {
  if (min_free == 0) return {};
  const auto space = disk_space(dir);
  if (!space) return std::unexpected("index " + dir + ": " + space.error());
  if (space->free < min_free)
    return std::unexpected("index " + dir + ": the file system has " + std::to_string(space->free) +
                           " bytes free, fewer than the " + std::to_string(min_free) +
                           " it must have to open");
  return {};
}

// Index directories open in this process, by canonical path. The LOCK
// probe below must not run on one of them: closing any descriptor of a file
// drops every fcntl lock this process holds on it, RocksDB's included.
std::mutex open_dirs_mu;
std::set<std::string> open_dirs;

std::string canonical(const std::string& dir) {
  std::error_code ec;
  const auto path = std::filesystem::weakly_canonical(dir, ec);
  return ec ? dir : path.string();
}

bool is_open_here(const std::string& dir) {
  std::lock_guard lock(open_dirs_mu);
  return open_dirs.count(canonical(dir)) > 0;
}

// Whether `dir` holds files beside the ones that do not make an index
// (RocksDB's LOCK, our LOG); errno on failure.
std::expected<bool, int> has_index_files(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::unexpected(errno);
  bool found = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != ".." && name != "LOCK" && name != "LOG") found = true;
  }
  ::closedir(d);
  return found;
}

// What one try at opening found.
enum class Verdict { kOpened, kDamaged, kRefused };
struct Attempt {
  Verdict verdict = Verdict::kRefused;
  std::string why;  // kDamaged: what is wrong with it; kRefused: the whole error
  std::unique_ptr<rocksdb::DB> db;
};

Attempt damaged(std::string why) { return {Verdict::kDamaged, std::move(why), nullptr}; }
Attempt refused(std::string why) { return {Verdict::kRefused, std::move(why), nullptr}; }

// Our own checks, then RocksDB. Damage is told from what is not damage by
// facts we check (what the path is, who holds LOCK, whether CURRENT exists)
// and by RocksDB's status codes (Corruption, PathNotFound), never by the
// text of its messages; whatever is not known to be damage is refused.
Attempt try_open(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return refused("index " + dir + ": " + errno_text(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    return damaged("it is not a directory");
  } else {
    // Someone else's before anything else: an index in use is never damage.
    if (is_open_here(dir)) return refused("index " + dir + " is already open in this process");
    const std::string lock_path = dir + "/LOCK";
    const int fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return refused("index " + lock_path + ": " + errno_text(errno));
    if (fd >= 0) {
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      const int rc = ::fcntl(fd, F_GETLK, &lock);
      const int error = errno;
      ::close(fd);
      if (rc != 0) return refused("index " + lock_path + ": " + errno_text(error));
      if (lock.l_type != F_UNLCK)
        return refused("index " + dir + " is in use by process " + std::to_string(lock.l_pid) +
                       " (another kvtierd with this l3_path?)");
    }
    const std::string current = dir + "/CURRENT";
    if (::access(current.c_str(), F_OK) != 0) {
      if (errno != ENOENT) return refused("index " + current + ": " + errno_text(errno));
      const auto files = has_index_files(dir);
      if (!files) return refused("index " + dir + ": " + errno_text(files.error()));
      // RocksDB would start a new database among the old files, or call it
      // corruption if a log is left.
      if (*files) return damaged("it has files but no CURRENT");
    }
  }

  auto db = open_db(dir);
  if (!db) {
    // PathNotFound: a file that CURRENT or the MANIFEST names is missing.
    if (db.error().IsCorruption() || db.error().IsPathNotFound())
      return damaged(db.error().ToString());
    return refused("index " + dir + ": " + db.error().ToString());
  }
  return {Verdict::kOpened, {}, std::move(*db)};
}

}  // namespace

L3Index::L3Index(std::string dir, std::uint64_t min_free_bytes, std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)),
      open_as_(canonical(dir_)),
      min_free_bytes_(min_free_bytes),
      db_(std::move(db)) {
  std::lock_guard lock(open_dirs_mu);
  open_dirs.insert(open_as_);
}

L3Index::~L3Index() {
  db_.reset();
  std::lock_guard lock(open_dirs_mu);
  open_dirs.erase(open_as_);
}

namespace {

// The rest of an open, on the database try_open opened: the format record
// and the entries. kOpened with `out` filled, or why not.
Attempt load(const std::string& dir, std::unique_ptr<rocksdb::DB>& db, std::uint64_t format_tag,
             std::uint64_t block_bytes, L3Index::Opened& out) {
  // RocksDB's Corruption met while reading is damage like any other.
  auto failed = [&](const std::string& what, const rocksdb::Status& s) {
    if (s.IsCorruption()) return damaged(what + ": " + s.ToString());
    return refused("index " + dir + ": " + what + ": " + s.ToString());
  };
  const std::string want_meta = L3Index::encode_meta({format_tag, block_bytes});
  std::string meta;
  const rocksdb::Status got = db->Get(rocksdb::ReadOptions(), L3Index::kMetaKey, &meta);
  if (!got.ok() && !got.IsNotFound()) return failed("reading its format", got);

  bool discard = false;
  if (got.IsNotFound()) {
    // A new index, or one whose format record was lost: entries of unknown
    // format are not served.
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->Seek(std::string(1, L3Index::kEntryPrefix));
    if (it->Valid() && !it->key().empty() && it->key()[0] == L3Index::kEntryPrefix) {
      out.warnings.push_back("index " + dir +
                             " has entries but no format record; its entries are discarded");
      discard = true;
    }
  } else if (meta != want_meta) {
    if (const auto old = L3Index::decode_meta(meta))
      out.warnings.push_back("index " + dir + " was written with format_tag " +
                             std::to_string(old->format_tag) + " and block_bytes " +
                             std::to_string(old->block_bytes) + ", not " +
                             std::to_string(format_tag) + " and " + std::to_string(block_bytes) +
                             "; its entries are discarded");
    else
      out.warnings.push_back("index " + dir +
                             " has an unreadable format record; its entries are discarded");
    discard = true;
  }
  if (discard) {
    db.reset();
    rocksdb::Options options = db_options(no_logger());
    const rocksdb::Status s = rocksdb::DestroyDB(dir, options);
    if (!s.ok()) return refused("index " + dir + ": discarding it: " + s.ToString());
    auto reopened = open_db(dir);
    if (!reopened) return refused("index " + dir + ": " + reopened.error().ToString());
    db = std::move(*reopened);
  }
  if (got.IsNotFound() || discard) {
    const rocksdb::Status s = db->Put(rocksdb::WriteOptions(), L3Index::kMetaKey, want_meta);
    if (!s.ok()) return refused("index " + dir + ": writing its format: " + s.ToString());
  }

  // Every entry; corrupt ones are deleted so they are reported once.
  rocksdb::WriteBatch drop;
  int dropped = 0;
  std::string first_dropped;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(std::string(1, L3Index::kEntryPrefix)); it->Valid(); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    if (k.empty() || k[0] != L3Index::kEntryPrefix) break;
    const auto key = L3Index::decode_key(k);
    std::optional<L3Entry> entry;
    if (key)
      entry = L3Index::decode_value(*key, std::string_view(it->value().data(), it->value().size()));
    if (!entry) {
      if (dropped++ == 0)
        first_dropped = key ? std::to_string(key->hi) + ":" + std::to_string(key->lo)
                            : std::to_string(k.size()) + "-byte key";
      drop.Delete(it->key());
      continue;
    }
    out.entries.push_back(std::move(*entry));
  }
  if (!it->status().ok()) return failed("reading entries", it->status());
  it.reset();
  if (dropped > 0) {
    out.warnings.push_back("index " + dir + ": dropped " + std::to_string(dropped) +
                           " undecodable entries (first: " + first_dropped + ")");
    db->Write(rocksdb::WriteOptions(), &drop);  // best effort: they are skipped again if not
  }
  return {Verdict::kOpened, {}, nullptr};
}

}  // namespace

std::expected<L3Index::Opened, std::string> L3Index::open(const std::string& dir,
                                                          std::uint64_t format_tag,
                                                          std::uint64_t block_bytes,
                                                          std::uint64_t min_free_bytes) {
  // RocksDB must not meet a full disk while it opens (see the header).
  if (auto room = check_room(dir, min_free_bytes); !room) return std::unexpected(room.error());
  std::string moved;  // the warning, once a damaged index was moved aside
  for (;;) {
    Attempt a = try_open(dir);
    Opened out;
    if (a.verdict == Verdict::kOpened) {
      Attempt loaded = load(dir, a.db, format_tag, block_bytes, out);
      if (loaded.verdict == Verdict::kOpened) {
        if (!moved.empty()) out.warnings.insert(out.warnings.begin(), moved);
        out.index.reset(new L3Index(dir, min_free_bytes, std::move(a.db)));
        return out;
      }
      a.db.reset();  // closed before its directory moves
      a.verdict = loaded.verdict;
      a.why = std::move(loaded.why);
    }
    if (a.verdict == Verdict::kRefused) return std::unexpected(a.why);
    if (!moved.empty())
      return std::unexpected("index " + dir +
                             " is damaged again after the old one was moved aside: " + a.why);
    // One damaged copy is kept, for a post-mortem; an older one goes, so
    // that damage at every start cannot fill the disk.
    const std::string aside = dir + ".damaged";
    std::error_code ec;
    std::filesystem::remove_all(aside, ec);
    if (!ec) std::filesystem::rename(dir, aside, ec);
    if (ec)
      return std::unexpected("index " + dir + " is damaged (" + a.why +
                             ") and cannot be moved to " + aside + ": " + ec.message());
    moved = "index " + dir + " is damaged (" + a.why + "); moved to " + aside + ", L3 starts empty";
  }
}

std::string L3Index::fail(const std::string& what, const std::string& status) {
  std::lock_guard lock(failure_mu_);
  if (!failed_.load()) failure_ = what + ": " + status;
  failed_.store(true);
  return "index " + what + ": " + status;
}

std::expected<void, std::string> L3Index::refuse_if_failed(const char* what) const {
  if (!failed_.load()) return {};
  std::lock_guard lock(failure_mu_);
  return std::unexpected(std::string("index ") + what +
                         ": not tried since an earlier write failed (" + failure_ + ")");
}

bool L3Index::failed() const { return failed_.load(); }

std::expected<void, std::string> L3Index::put(std::span<const L3Entry> entries) {
  if (auto r = refuse_if_failed("put"); !r) return r;
  rocksdb::WriteBatch batch;
  for (const L3Entry& e : entries) batch.Put(encode_key(e.record.key), encode_value(e));
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return std::unexpected(fail("put", s.ToString()));
  return {};
}

std::expected<void, std::string> L3Index::sync() {
  // SyncWAL on a log whose write failed is one of RocksDB's aborts.
  if (auto r = refuse_if_failed("sync"); !r) return r;
  const rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) return std::unexpected(fail("sync", s.ToString()));
  return {};
}

std::expected<void, std::string> L3Index::erase(std::span<const BlockKey> keys) {
  if (auto r = refuse_if_failed("erase"); !r) return r;
  rocksdb::WriteBatch batch;
  for (const BlockKey& k : keys) batch.Delete(encode_key(k));
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return std::unexpected(fail("erase", s.ToString()));
  return {};
}

std::expected<void, std::string> L3Index::recover() {
  if (!failed_.load()) return {};
  if (auto room = check_room(dir_, min_free_bytes_); !room) return room;
  // Not DB::Resume(): with an empty memtable it keeps the log that failed,
  // and the next write aborts (see the header). A new open starts a new log
  // and replays what the old one holds.
  db_.reset();
  auto db = open_db(dir_);
  if (!db) return std::unexpected("index " + dir_ + ": reopening: " + db.error().ToString());
  db_ = std::move(*db);
  std::lock_guard lock(failure_mu_);
  failure_.clear();
  failed_.store(false);
  return {};
}

}  // namespace kvtier::tiers
