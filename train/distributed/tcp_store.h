// A client of PyTorch's TCPStore, the key-value store torchrun's agent hosts at MASTER_ADDR:
// MASTER_PORT for its workers (TORCHELASTIC_USE_AGENT_STORE=True). Under torchrun that port is
// taken, so the ranks meet in the store instead: rank 0 puts NCCL's unique id under a key, the
// others read it. Only what that needs is spoken: validate, ping, set, check and get (the wire
// format of torch/csrc/distributed/c10d/TCPStore.cpp: a query byte, then 8-byte lengths before
// keys and values, in the host's byte order).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

class TcpStoreClient {
 public:
  /// Connects to host:port, retrying until `timeout` (the agent's store is up before its workers
  /// start, but a connection refused in between is retried), then checks that a TCPStore answers.
  /// A failure is an ft::Error naming the address.
  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value);
  /// Whether every key is set, now.
  bool check(const std::vector<std::string>& keys);
  /// The value of `key`, once some client has set it; an ft::Error after `timeout` without it.
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  void send_all(const std::vector<uint8_t>& bytes);
  void receive_all(void* out, size_t bytes);

  std::string where_;  // "host:port", for messages
  int fd_ = -1;
  std::chrono::milliseconds timeout_;
};

}  // namespace ft
