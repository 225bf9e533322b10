// attnserve-loadgen: a gRPC load generator whose own CPU stays small, so that on a 2-core
// machine it does not starve the server it measures (a Python asyncio client spends about as
// much CPU per call as the server does). C++ and gRPC's async API from Debian's libgrpc++-dev;
// built by `make overload` (bench/cpp/Makefile).
//
// It sends pre-serialized request messages (any method: it uses the generic stub, so it needs
// no generated code) open loop, at a fixed rate whatever the replies (--rate), closed loop, with
// a fixed number of calls outstanding (--concurrency; each keeps its connection), or all at once
// (--burst), over --channels connections. Every call carries the
// deadline --deadline-ms. At the end it prints one JSON object: calls by status code, goodput
// (OK answers per second; an answer after the deadline is DEADLINE_EXCEEDED, not OK), latency
// percentiles by status code, and its own CPU seconds.
//
//   attnserve-loadgen --target 127.0.0.1:50051 --method /inference.GRPCInferenceService/ModelInfer
//       --requests reqs.bin --rate 3000 --seconds 10 --deadline-ms 1000
//
// reqs.bin holds serialized messages, each after its length (4 bytes, little-endian); calls
// cycle through them.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

const char* kCodeNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                            "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                            "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                            "UNAUTHENTICATED"};

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string method;
  std::string requests;
  double rate = 0;       // calls per second, open loop
  int concurrency = 0;   // calls outstanding, closed loop
  long burst = 0;        // calls sent at once
  double seconds = 10;
  double deadline_ms = 1000;
  int channels = 4;      // connections: one HTTP/2 connection serializes on one core of the server's I/O
};

struct Call {
  grpc::ClientContext ctx;
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc;
  Clock::time_point sent;
  size_t channel;
};

struct Result {
  int code;
  float latency_ms;
};

class Generator {
 public:
  explicit Generator(const Options& o) : o_(o) {
    grpc::ChannelArguments args;
    // Each channel its own subchannel pool: channels to one address share one connection otherwise
    // (distinct arguments alone do not part them), and a server of several worker processes sees
    // one connection go to one worker.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (int i = 0; i < o.channels; ++i) {
      args.SetInt("attnserve.loadgen.channel", i);
      auto channel = grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    std::ifstream in(o.requests, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = 0; at + 4 <= all.size();) {
      uint32_t n;
      std::memcpy(&n, all.data() + at, 4);
      at += 4;
      requests_.push_back(all.substr(at, n));
      at += n;
    }
  }

  bool ok() const { return !requests_.empty(); }

  void Run() {
    start_ = Clock::now();
    end_ = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.seconds));
    std::thread receiver([this] { Receive(); });
    if (o_.burst > 0) {
      for (long i = 0; i < o_.burst; ++i) Send();  // all at once, then only wait for the replies
    } else if (o_.concurrency > 0) {
      for (int i = 0; i < o_.concurrency; ++i) Send(i % stubs_.size());
    } else {
      OpenLoop();
    }
    sending_done_ = true;
    if (outstanding_.load() == 0) ShutdownOnce();  // every reply came before sending ended
    receiver.join();
    elapsed_s_ = std::chrono::duration<double>(Clock::now() - start_).count();
  }

  void Print() const {
    std::map<int, std::vector<float>> by_code;  // status code -> latencies (ms)
    for (const Result& r : results_) by_code[r.code].push_back(r.latency_ms);
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    double cpu = u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
    std::printf("{\"sent\": %ld, \"answered\": %zu, \"seconds\": %.3f, \"send_seconds\": %.3f, \"codes\": {",
                sent_.load(), results_.size(), elapsed_s_, o_.seconds);
    bool first = true;
    for (const auto& [code, ms] : by_code) {
      std::printf("%s\"%s\": %zu", first ? "" : ", ", Name(code), ms.size());
      first = false;
    }
    std::printf("}, \"latency_ms\": {");
    first = true;
    for (const auto& [code, ms] : by_code) {
      std::printf("%s\"%s\": %s", first ? "" : ", ", Name(code), Percentiles(ms).c_str());
      first = false;
    }
    long ok = by_code.count(0) ? static_cast<long>(by_code.at(0).size()) : 0;
    std::printf("}, \"goodput_per_s\": %.1f, \"client_cpu_s\": %.3f}\n", ok / o_.seconds, cpu);
  }

 private:
  static const char* Name(int code) { return code >= 0 && code <= 16 ? kCodeNames[code] : "?"; }

  static std::string Percentiles(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
    char buf[160];
    std::snprintf(buf, sizeof buf, "{\"n\": %zu, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f}", v.size(),
                  at(0.5), at(0.9), at(0.99));
    return buf;
  }

  // Open loop: by each moment, as many calls sent as the rate says; never waits for replies.
  void OpenLoop() {
    for (;;) {
      auto now = Clock::now();
      if (now >= end_) return;
      long due = static_cast<long>(std::chrono::duration<double>(now - start_).count() * o_.rate) + 1;
      while (sent_.load() < due) Send();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // channel: the connection to send on; by default the calls take the connections in turn. Closed loop,
  // each outstanding call keeps its connection for the next (as ghz spreads its workers over its
  // connections): taken in turn, every connection carries the same share of the calls, and where a
  // server's processes took unequal numbers of connections (SO_REUSEPORT), the busiest one paces all.
  void Send(long channel = -1) {
    long i = sent_.fetch_add(1);
    outstanding_.fetch_add(1);
    auto* call = new Call;
    call->sent = Clock::now();
    // gRPC takes deadlines on the system clock.
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<long>(o_.deadline_ms * 1000)));
    const std::string& raw = requests_[i % requests_.size()];
    grpc::Slice slice(raw.data(), raw.size());
    grpc::ByteBuffer request(&slice, 1);
    call->channel = channel >= 0 ? static_cast<size_t>(channel) : i % stubs_.size();
    call->rpc = stubs_[call->channel]->PrepareUnaryCall(&call->ctx, o_.method, request, &cq_);
    call->rpc->StartCall();
    call->rpc->Finish(&call->reply, &call->status, call);
  }

  void Receive() {
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
      auto* call = static_cast<Call*>(tag);
      float ms = std::chrono::duration<float, std::milli>(Clock::now() - call->sent).count();
      results_.push_back({static_cast<int>(call->status.error_code()), ms});
      long channel = static_cast<long>(call->channel);
      delete call;
      bool more = o_.concurrency > 0 && Clock::now() < end_;
      if (more) Send(channel);  // closed loop: a reply makes room for the next call, on its connection
      if (outstanding_.fetch_sub(1) == 1 && sending_done_ && !more) ShutdownOnce();
    }
  }

  void ShutdownOnce() {
    bool expected = false;
    if (shut_down_.compare_exchange_strong(expected, true)) cq_.Shutdown();
  }

  Options o_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  std::vector<std::string> requests_;
  grpc::CompletionQueue cq_;
  std::vector<Result> results_;  // written by the receiver thread only
  std::atomic<long> sent_{0}, outstanding_{0};
  std::atomic<bool> sending_done_{false}, shut_down_{false};
  Clock::time_point start_, end_;
  double elapsed_s_ = 0;
};

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--target") o->target = v;
    else if (k == "--method") o->method = v;
    else if (k == "--requests") o->requests = v;
    else if (k == "--rate") o->rate = std::stod(v);
    else if (k == "--concurrency") o->concurrency = std::stoi(v);
    else if (k == "--burst") o->burst = std::stol(v);
    else if (k == "--seconds") o->seconds = std::stod(v);
    else if (k == "--deadline-ms") o->deadline_ms = std::stod(v);
    else if (k == "--channels") o->channels = std::stoi(v);
    else return false;
  }
  int modes = (o->rate > 0) + (o->concurrency > 0) + (o->burst > 0);
  return !o->method.empty() && !o->requests.empty() && modes == 1 && o->channels > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc % 2 == 0 || !Parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s --method /pkg.Service/Method --requests FILE (--rate CALLS_PER_S | --concurrency N | --burst N)\n"
                 "          [--target HOST:PORT] [--seconds S] [--deadline-ms MS] [--channels N]\n",
                 argv[0]);
    return 2;
  }
  Generator g(o);
  if (!g.ok()) {
    std::fprintf(stderr, "%s: no request messages in %s\n", argv[0], o.requests.c_str());
    return 2;
  }
  g.Run();
  g.Print();
  return 0;
}
