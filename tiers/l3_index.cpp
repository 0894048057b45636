#include "tiers/l3_index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <utility>

namespace kvtier::tiers {

namespace {

constexpr char kEntryPrefix = 'k';
constexpr char kMetaKey[] = "m";
constexpr std::uint8_t kValueVersion = 1;
constexpr std::uint8_t kMetaVersion = 1;
// version, offset, length, checksum, parent (2), fingerprint, last_use, token count.
constexpr std::size_t kValueHeaderBytes = 1 + 8 + 4 + 8 + 16 + 8 + 8 + 4;
constexpr std::size_t kMetaBytes = 1 + 8 + 8;

// Fixed-width little-endian fields, byte by byte so the format does not
// depend on the host.
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64_be(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Reads fields off the front of a byte range; every get checks the length.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  std::optional<std::uint64_t> u64() { return uint(8); }
  std::optional<std::uint32_t> u32() {
    auto v = uint(4);
    if (!v) return std::nullopt;
    return static_cast<std::uint32_t>(*v);
  }
  std::optional<std::uint8_t> u8() {
    auto v = uint(1);
    if (!v) return std::nullopt;
    return static_cast<std::uint8_t>(*v);
  }
  std::size_t left() const { return bytes_.size(); }

 private:
  // Once a read has failed, every later one fails too: a field read after a
  // missing one would otherwise come from the bytes the missing one lacked.
  std::optional<std::uint64_t> uint(int n) {
    if (failed_ || bytes_.size() < static_cast<std::size_t>(n)) {
      failed_ = true;
      return std::nullopt;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes_[i])) << (8 * i);
    bytes_.remove_prefix(n);
    return v;
  }
  std::string_view bytes_;
  bool failed_ = false;
};

std::uint64_t get_u64_be(std::string_view b) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

std::string encode_meta(std::uint64_t format_tag, std::uint64_t block_bytes) {
  std::string out;
  out.push_back(static_cast<char>(kMetaVersion));
  put_u64(out, format_tag);
  put_u64(out, block_bytes);
  return out;
}

rocksdb::Options db_options() {
  rocksdb::Options options;
  options.create_if_missing = true;
  // The index is small (about 200 bytes an entry), but every write, use and
  // erase appends to the memtable, which only a flush empties: a small one
  // keeps the daemon's memory flat under a steady load (a soak showed an
  // 8 MiB one growing the RSS by 3.7 MiB in 10 minutes). RocksDB's
  // informational log stays quiet and short.
  options.write_buffer_size = 1 << 20;
  options.max_write_buffer_number = 2;
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.keep_log_file_num = 2;
  options.max_open_files = 256;
  return options;
}

std::expected<std::unique_ptr<rocksdb::DB>, rocksdb::Status> open_db(const std::string& dir) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options(), dir, &raw);
  if (!s.ok()) return std::unexpected(s);
  return std::unique_ptr<rocksdb::DB>(raw);
}

}  // namespace

L3Index::L3Index(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}
L3Index::~L3Index() = default;

std::string L3Index::encode_key(const BlockKey& key) {
  std::string out(1, kEntryPrefix);
  put_u64_be(out, key.hi);
  put_u64_be(out, key.lo);
  return out;
}

std::optional<BlockKey> L3Index::decode_key(std::string_view bytes) {
  if (bytes.size() != 17 || bytes[0] != kEntryPrefix) return std::nullopt;
  return BlockKey{get_u64_be(bytes.substr(1)), get_u64_be(bytes.substr(9))};
}

std::string L3Index::encode_value(const L3Entry& e) {
  std::string out;
  out.reserve(kValueHeaderBytes + 4 * e.record.tokens.size());
  out.push_back(static_cast<char>(kValueVersion));
  put_u64(out, e.offset);
  put_u32(out, e.length);
  put_u64(out, e.checksum);
  put_u64(out, e.record.parent.hi);
  put_u64(out, e.record.parent.lo);
  put_u64(out, e.record.fingerprint);
  put_u64(out, e.last_use);
  put_u32(out, static_cast<std::uint32_t>(e.record.tokens.size()));
  for (std::int32_t t : e.record.tokens) put_u32(out, static_cast<std::uint32_t>(t));
  return out;
}

std::optional<L3Entry> L3Index::decode_value(const BlockKey& key, std::string_view bytes) {
  Reader r(bytes);
  L3Entry e;
  e.record.key = key;
  const auto version = r.u8();
  if (!version || *version != kValueVersion) return std::nullopt;
  const auto offset = r.u64();
  const auto length = r.u32();
  const auto checksum = r.u64();
  const auto parent_hi = r.u64();
  const auto parent_lo = r.u64();
  const auto fingerprint = r.u64();
  const auto last_use = r.u64();
  const auto count = r.u32();
  if (!count) return std::nullopt;  // a failed read fails the rest: every field is present
  // Exactly the tokens it announces: nothing missing, nothing trailing. The
  // check comes before any allocation, so a corrupt count cannot ask for 16 GB.
  if (r.left() != static_cast<std::size_t>(*count) * 4) return std::nullopt;
  e.offset = *offset;
  e.length = *length;
  e.checksum = *checksum;
  e.record.parent = {*parent_hi, *parent_lo};
  e.record.fingerprint = *fingerprint;
  e.last_use = *last_use;
  e.record.tokens.resize(*count);
  for (auto& t : e.record.tokens) t = static_cast<std::int32_t>(*r.u32());
  return e;
}

std::expected<L3Index::Opened, std::string> L3Index::open(const std::string& dir,
                                                          std::uint64_t format_tag,
                                                          std::uint64_t block_bytes) {
  Opened out;
  auto db = open_db(dir);
  if (!db && db.error().IsCorruption()) {
    // An index we cannot read is a cache we do not have: start empty.
    out.warnings.push_back("index " + dir + " is corrupt (" + db.error().ToString() +
                           "); its entries are discarded");
    rocksdb::DestroyDB(dir, db_options());
    db = open_db(dir);
  }
  if (!db) return std::unexpected("index " + dir + ": " + db.error().ToString());

  const std::string want_meta = encode_meta(format_tag, block_bytes);
  std::string meta;
  const rocksdb::Status got = (*db)->Get(rocksdb::ReadOptions(), kMetaKey, &meta);
  if (!got.ok() && !got.IsNotFound())
    return std::unexpected("index " + dir + ": reading its format: " + got.ToString());

  bool discard = false;
  if (got.IsNotFound()) {
    // A new index, or one whose format record was lost: entries of unknown
    // format are not served.
    std::unique_ptr<rocksdb::Iterator> it((*db)->NewIterator(rocksdb::ReadOptions()));
    it->Seek(std::string(1, kEntryPrefix));
    if (it->Valid() && !it->key().empty() && it->key()[0] == kEntryPrefix) {
      out.warnings.push_back("index " + dir +
                             " has entries but no format record; its entries are discarded");
      discard = true;
    }
  } else if (meta != want_meta) {
    Reader r(meta);
    const auto version = r.u8();
    const auto old_tag = r.u64();
    const auto old_block = r.u64();
    if (meta.size() == kMetaBytes && version && *version == kMetaVersion)
      out.warnings.push_back("index " + dir + " was written with format_tag " +
                             std::to_string(*old_tag) + " and block_bytes " +
                             std::to_string(*old_block) + ", not " + std::to_string(format_tag) +
                             " and " + std::to_string(block_bytes) + "; its entries are discarded");
    else
      out.warnings.push_back("index " + dir +
                             " has an unreadable format record; its entries are discarded");
    discard = true;
  }
  if (discard) {
    db->reset();
    const rocksdb::Status s = rocksdb::DestroyDB(dir, db_options());
    if (!s.ok()) return std::unexpected("index " + dir + ": discarding it: " + s.ToString());
    db = open_db(dir);
    if (!db) return std::unexpected("index " + dir + ": " + db.error().ToString());
  }
  if (got.IsNotFound() || discard) {
    const rocksdb::Status s = (*db)->Put(rocksdb::WriteOptions(), kMetaKey, want_meta);
    if (!s.ok()) return std::unexpected("index " + dir + ": writing its format: " + s.ToString());
  }

  // Every entry; corrupt ones are deleted so they are reported once.
  rocksdb::WriteBatch drop;
  int dropped = 0;
  std::string first_dropped;
  std::unique_ptr<rocksdb::Iterator> it((*db)->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(std::string(1, kEntryPrefix)); it->Valid(); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    if (k.empty() || k[0] != kEntryPrefix) break;
    const auto key = decode_key(k);
    std::optional<L3Entry> entry;
    if (key) entry = decode_value(*key, std::string_view(it->value().data(), it->value().size()));
    if (!entry) {
      if (dropped++ == 0)
        first_dropped = key ? std::to_string(key->hi) + ":" + std::to_string(key->lo)
                            : std::to_string(k.size()) + "-byte key";
      drop.Delete(it->key());
      continue;
    }
    out.entries.push_back(std::move(*entry));
  }
  if (!it->status().ok())
    return std::unexpected("index " + dir + ": reading entries: " + it->status().ToString());
  it.reset();
  if (dropped > 0) {
    out.warnings.push_back("index " + dir + ": dropped " + std::to_string(dropped) +
                           " undecodable entries (first: " + first_dropped + ")");
    (*db)->Write(rocksdb::WriteOptions(), &drop);  // best effort: they are skipped again if not
  }
  out.index.reset(new L3Index(std::move(*db)));
  return out;
}

std::expected<void, std::string> L3Index::put(std::span<const L3Entry> entries) {
  rocksdb::WriteBatch batch;
  for (const L3Entry& e : entries) batch.Put(encode_key(e.record.key), encode_value(e));
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return std::unexpected("index put: " + s.ToString());
  return {};
}

std::expected<void, std::string> L3Index::sync() {
  const rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) return std::unexpected("index sync: " + s.ToString());
  return {};
}

std::expected<void, std::string> L3Index::erase(std::span<const BlockKey> keys) {
  rocksdb::WriteBatch batch;
  for (const BlockKey& k : keys) batch.Delete(encode_key(k));
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return std::unexpected("index erase: " + s.ToString());
  return {};
}

}  // namespace kvtier::tiers
