#include "train/distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "lib/error.h"

namespace ft {

namespace {

// TCPStore's query codes and its client validation word (c10d's QueryType, validationMagicNumber).
enum class Query : uint8_t { Validate = 0, Set = 1, Get = 3, Check = 5, Ping = 13 };
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kCheckReady = 0;

class Message {
 public:
  explicit Message(Query query) { bytes_.push_back(static_cast<uint8_t>(query)); }
  template <class T>
  Message& value(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  Message& blob(const void* data, size_t n) {
    value<uint64_t>(n);
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
    return *this;
  }
  Message& text(const std::string& s) { return blob(s.data(), s.size()); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

int connect_once(const std::string& host, int port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (status != 0) {
    why = ::gai_strerror(status);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  std::string why;
  while ((fd_ = connect_once(host, port, why)) < 0) {
    FT_CHECK(std::chrono::steady_clock::now() < give_up, "torchrun's store at ", where_, " did not accept a ",
             "connection within ", timeout.count() / 1000.0, " s: ", why);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The first query must validate the client; a ping then shows the other end speaks TCPStore.
  send_all(Message(Query::Validate).value(kValidationMagic).bytes());
  const uint32_t nonce = static_cast<uint32_t>(::getpid());
  send_all(Message(Query::Ping).value(nonce).bytes());
  uint32_t echoed = 0;
  receive_all(&echoed, sizeof(echoed));
  FT_CHECK(echoed == nonce, "the server at ", where_, " is not a TCPStore (its ping answer was ", echoed,
           ", not ", nonce, ")");
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStoreClient::send_all(const std::vector<uint8_t>& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    FT_CHECK(n > 0, "torchrun's store at ", where_, ": sending failed: ", std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
}

void TcpStoreClient::receive_all(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < bytes) {
    pollfd ready{fd_, POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(timeout_.count()));
    if (polled < 0 && errno == EINTR) continue;
    FT_CHECK(polled > 0, "torchrun's store at ", where_, " did not answer within ", timeout_.count() / 1000.0, " s");
    const ssize_t n = ::recv(fd_, p + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    FT_CHECK(n > 0, "torchrun's store at ", where_, n == 0 ? " closed the connection" : ": receiving failed: ",
             n == 0 ? "" : std::strerror(errno));
    got += static_cast<size_t>(n);
  }
}

void TcpStoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  send_all(Message(Query::Set).text(key).blob(value.data(), value.size()).bytes());
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  Message query(Query::Check);
  query.value<uint64_t>(keys.size());
  for (const std::string& key : keys) query.text(key);
  send_all(query.bytes());
  uint8_t answer = 1;
  receive_all(&answer, sizeof(answer));
  return answer == kCheckReady;
}

std::vector<uint8_t> TcpStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  // Polled with CHECK rather than the store's WAIT, whose cancellation on a timeout is a
  // three-message exchange: a key that never comes is then a plain error here.
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!check({key})) {
    FT_CHECK(std::chrono::steady_clock::now() < give_up, "torchrun's store at ", where_, ": '", key,
             "' was not set within ", timeout.count() / 1000.0, " s (--comm-timeout): rank 0 did not start or ",
             "failed before it joined");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  send_all(Message(Query::Get).text(key).bytes());
  uint64_t size = 0;
  receive_all(&size, sizeof(size));
  FT_CHECK(size < (uint64_t{1} << 30), "torchrun's store at ", where_, ": '", key, "' claims ", size, " bytes");
  std::vector<uint8_t> value(size);
  receive_all(value.data(), value.size());
  return value;
}

}  // namespace ft
