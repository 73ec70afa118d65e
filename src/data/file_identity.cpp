// file_identity.cpp: see file_identity.h.
#include "data/file_identity.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace zt {
nlohmann::json FileIdentity::to_json() const {
  return {{"bytes", bytes}, {"prefix_bytes", std::min(bytes, kPrefixBytes)}, {"prefix_hash", hex64(prefix_hash)}};
}

std::string FileIdentity::describe() const { return str_cat(bytes, " bytes, first MiB hash ", hex64(prefix_hash)); }

FileIdentity file_identity(const std::string& path, const std::string& flag) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ZT_CHECK(f, "cannot read ", flag, " ", path, ": ", std::strerror(errno));
  FileIdentity id;
  std::vector<unsigned char> buf(FileIdentity::kPrefixBytes);
  const size_t n = std::fread(buf.data(), 1, buf.size(), f);
  const bool ok = !std::ferror(f) && std::fseek(f, 0, SEEK_END) == 0;
  const long size = ok ? std::ftell(f) : -1;
  std::fclose(f);
  ZT_CHECK(ok && size >= 0, "cannot read ", flag, " ", path);
  id.bytes = uint64_t(size);
  id.prefix_hash = hash64(buf.data(), n);
  return id;
}

void DataIdentity::save_state(StateWriter& w) const { w.put_json("ztrain.data.train_file", train_.to_json()); }

void DataIdentity::load_state(StateReader& r) {
  const nlohmann::json& saved = r.get_json("ztrain.data.train_file");
  if (saved == train_.to_json()) return;
  const bool readable = saved.is_object() && saved.contains("bytes") && saved["bytes"].is_number_unsigned() &&
                        saved.contains("prefix_hash") && saved["prefix_hash"].is_string();
  ZT_CHECK(readable, r.source(), ": \"ztrain.data.train_file\" is malformed; the checkpoint is damaged");
  change_ = str_cat("--train_file differs from the one the checkpoint was trained on (", saved["bytes"].get<uint64_t>(),
                    " bytes, first MiB hash ", saved["prefix_hash"].get<std::string>(), " there; ", train_.describe(),
                    " here)");
  ZT_CHECK(allow_change_, r.source(), ": ", change_,
           "; resume with the same data, or pass --resume_allow_changes data to continue on this file");
}

}  // namespace zt
