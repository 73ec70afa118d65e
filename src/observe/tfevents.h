// tfevents.h: a TensorBoard event-file writer with no dependencies. It writes TFRecord
// framing (length, masked CRC32C of the length, data, masked CRC32C of the data) around
// Event protobufs encoded by hand: the first event carries file_version "brain.Event:2",
// every later one a Summary with one scalar (tag, float simple_value).
//
// What it deliberately is not: no histograms, images, text or hparams, no protobuf or zlib
// dependency, no background thread. Data reaches the kernel on flush(), so a crashed process
// loses at most what was added after the last flush (a half-written last record is what
// TensorBoard already tolerates); there is no fsync, so a power loss can lose more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zt {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses. `crc` chains calls.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The masked form TFRecord stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c_masked(const void* data, size_t n);

class TfEventsWriter {
 public:
  // Creates `logdir` if needed and the file logdir/events.out.tfevents.<unix_seconds>.<hostname>.<pid>.<n>
  // (n counts writers opened by this process, from 0), then writes the file_version event.
  explicit TfEventsWriter(const std::string& logdir);
  ~TfEventsWriter();  // flushes and closes; never throws
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  // One scalar event; wall_time is now (seconds since the epoch). The value is stored as a
  // float, as TensorBoard's simple_value is; NaN and inf are written as they are.
  void add_scalar(const std::string& tag, int64_t step, double value);
  // Hands buffered records to the kernel (fflush).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zt
