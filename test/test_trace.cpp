// Seeing the graph and the run: the plan as DOT (checked by Graphviz itself), TensorFlow's
// log_device_placement, the step trace (Chrome trace-event JSON checked by
// scripts/check_trace.py, durations against the measured step, results unchanged by tracing,
// replicated towers) and the per-op profile's FLOP counts against the seed model's arithmetic.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "../examples/mnist/model.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
namespace fs = std::filesystem;
using i64 = std::int64_t;

namespace {

/// The seed's device function on two CPU devices: variables on cpu<0>, compute on cpu<1>.
using seed_policy = ty::variables_on<ty::cpu<0>, ty::compute_on<ty::cpu<1>>>;
using P = ty::compile::plan<ty::type_list<decltype(mnist::total_loss), decltype(mnist::train_op)>,
                            seed_policy>;

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("typeflow_trace_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

/// Runs a command; its exit status and standard output.
std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

struct batch_data {
  ty::tensor<float> images{std::vector<i64>{0, 28, 28, 1}};
  ty::tensor<std::int32_t> labels{std::vector<i64>{0}};
};
batch_data make_batch(i64 n, unsigned seed) {
  batch_data b{ty::tensor<float>({n, 28, 28, 1}), ty::tensor<std::int32_t>({n})};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& v : b.images)
    v = u(rng);
  for (auto& l : b.labels)
    l = static_cast<std::int32_t>(rng() % 10);
  return b;
}
template <class S>
auto train_step(S& s, const batch_data& b) {
  return std::get<0>(s.run(ty::fetch(mnist::total_loss, mnist::train_op),
                           ty::feed(mnist::images, b.images), ty::feed(mnist::labels, b.labels)));
}

/// Graphviz's own reading of a DOT text: its JSON form (`dot -Tjson0`).
nlohmann::json graphviz_json(const std::string& dot) {
  const fs::path file = temp_dir() / "graph.dot";
  ty::save_graph(dot, file);
  const auto [status, out] = run_command("dot -Tjson0 " + file.string() + " 2>&1");
  REQUIRE_MESSAGE(status == 0, "dot failed: " << out);
  return nlohmann::json::parse(out);
}
/// Graphviz's objects (nodes and clusters) whose id starts with `prefix`.
std::vector<nlohmann::json> with_id(const nlohmann::json& g, const std::string& prefix,
                                    bool clusters) {
  std::vector<nlohmann::json> r;
  for (const auto& o : g["objects"]) {
    const bool is_cluster = o.contains("nodes") || o.contains("subgraphs");
    if (is_cluster == clusters && o.contains("id") &&
        o["id"].get<std::string>().rfind(prefix, 0) == 0)
      r.push_back(o);
  }
  return r;
}

} // namespace

TEST_CASE("the seed's training graph as DOT: Graphviz reads it; nodes, clusters, devices and "
          "transfers are the plan's") {
  const std::string dot = ty::to_dot<P>();
  const auto g = graphviz_json(dot);
  constexpr auto& L = P::layout;
  // Every node but the constants folded into loops.
  std::size_t drawn = 0, fused_units = 0;
  for (std::size_t i = 0; i < P::size; ++i) {
    drawn += L.step[i] != ty::graph::step_kind::inline_constant;
    std::size_t members = 0;
    for (std::size_t m = L.member_begin[i]; m < L.member_begin[i + 1]; ++m)
      members += L.step[L.members[m]] != ty::graph::step_kind::inline_constant;
    fused_units += L.step[i] == ty::graph::step_kind::kernel && members > 1;
  }
  CHECK(with_id(g, "n", false).size() == drawn);
  // One cluster per fused region, epilogue, prologue and chain.
  CHECK(with_id(g, "region", true).size() ==
        fused_units + P::layout.epilogues + P::layout.prologues + P::layout.chains);
  CHECK(P::layout.chains == 2);    // relu's gradients after conv1's and conv2's pools
  CHECK(P::layout.epilogues == 5); // conv1, conv2, local3, local4, softmax_linear
  // Two devices, and every edge read through a transfer marked.
  CHECK(with_id(g, "device", false).size() == 2);
  std::size_t transfer_edges = 0;
  for (std::size_t e = 0; e < P::fact.edge_begin[P::size]; ++e)
    transfer_edges += P::placement.edge_transfer[e] != P::none_v;
  std::size_t marked = 0;
  for (const auto& e : g["edges"])
    marked += e.contains("id") && e["id"].get<std::string>().rfind("t", 0) == 0;
  CHECK(transfer_edges > 0);
  CHECK(marked == transfer_edges);
  // The parts: the gradients apart from the forward, the optimizer's update apart from both.
  const auto forward = with_id(g, "forward", true), gradients = with_id(g, "gradients", true),
             update = with_id(g, "update", true);
  REQUIRE(forward.size() == 1);
  REQUIRE(gradients.size() == 1);
  REQUIRE(update.size() == 1);
  const auto labels_in = [&](const nlohmann::json& cluster) {
    std::string all;
    for (const auto& k : cluster["nodes"])
      all += g["objects"][k.get<std::size_t>()]["label"].get<std::string>() + "|";
    return all;
  };
  const std::string f = labels_in(forward[0]), gr = labels_in(gradients[0]),
                    u = labels_in(update[0]);
  CHECK(f.find(" conv2d\\n") != std::string::npos);
  CHECK(f.find("sparse_softmax_cross_entropy_with_logits") != std::string::npos);
  CHECK(f.find("backprop") == std::string::npos);
  CHECK(gr.find("conv2d_backprop_filter") != std::string::npos);
  CHECK(gr.find("max_pool_grad") != std::string::npos);
  CHECK(u.find("assign") != std::string::npos);
  CHECK(u.find("conv2d") == std::string::npos);
  // A node's label: index, op, dtype and static shape (`?` for the batch).
  CHECK(dot.find("conv2d\\nfloat32 [?,28,28,32]") != std::string::npos);

  SUBCASE("collapsed regions: one box per region") {
    const auto c = graphviz_json(ty::to_dot<P>(ty::dot_options{.collapse_regions = true}));
    CHECK(with_id(c, "region", true).empty());
    CHECK(with_id(c, "n", false).size() < drawn);
    CHECK(with_id(c, "device", false).size() == 2);
  }
  SUBCASE("SVG through Graphviz; an unknown format is an error and writes nothing") {
    const fs::path svg = temp_dir() / "graph.svg";
    ty::save_graph(dot, svg);
    std::ifstream in(svg);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("<svg") != std::string::npos);
    CHECK(!fs::exists(svg.string() + ".dot.tmp"));
    CHECK(!fs::exists(svg.string() + ".render.tmp"));
    // A DOT text dot cannot read: an error, and the good picture stays as it was.
    CHECK_THROWS_WITH_AS(ty::save_graph("digraph { a -> }", svg),
                         doctest::Contains("failed to render"), ty::error);
    std::ifstream again(svg);
    CHECK(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()) ==
          text);
    CHECK(!fs::exists(svg.string() + ".render.tmp"));
    CHECK_THROWS_WITH_AS(ty::save_graph(dot, temp_dir() / "graph.bmp"),
                         doctest::Contains("unknown format"), ty::error);
    CHECK(!fs::exists(temp_dir() / "graph.bmp"));
  }
}

TEST_CASE("log_device_placement: every node and transfer once, in TensorFlow's format") {
  std::ostringstream log;
  ty::session<seed_policy> s(
      ty::session_options{.seed = 1, .log_device_placement = true, .log = &log});
  s.initialize(mnist::train_op);
  const auto b = make_batch(8, 1);
  (void)train_step(s, b);
  const std::string first = log.str();
  std::size_t lines = 0;
  for (char c : first)
    lines += c == '\n';
  CHECK(lines == P::size + 2 * P::transfers);
  CHECK(first.find(" conv1/weights: (variable): /job:localhost/replica:0/task:0/device:CPU:0\n") !=
        std::string::npos);
  CHECK(first.find(": (conv2d): /job:localhost/replica:0/task:0/device:CPU:1\n") !=
        std::string::npos);
  CHECK(first.find("/recv: (recv): /job:localhost/replica:0/task:0/device:CPU:1\n") !=
        std::string::npos);
  (void)train_step(s, b);
  CHECK(log.str() == first); // the second run of the same plan logs nothing
}

TEST_CASE("a trace on one device: only views move no bytes") {
  // On one CPU, conv2's input gradient writes dx over x (pool1's output, which it reads only for
  // its shape and which dies with it): a kernel writing in place, not a view.
  const auto b = make_batch(16, 4);
  ty::trace_recorder rec;
  ty::session<> s(ty::session_options{.threads = 2, .seed = 3, .trace = &rec});
  s.initialize(mnist::train_op);
  (void)train_step(s, b);
  std::size_t input_gradients = 0;
  for (const auto& e : rec.events()) {
    if (e.what != ty::trace_event::type::step)
      continue;
    const std::string k = e.plan->kernel[e.node];
    INFO(k);
    if (k == "conv2d_backprop_input") {
      ++input_gradients;
      CHECK(e.bytes > 0);
    }
    if (e.bytes == 0)
      CHECK((k == "reshape" || k == "reshape_like" || k == "expand_dims" || k == "replica_mean" ||
             k == "assign"));
  }
  CHECK(input_gradients == 1);
}

TEST_CASE("a trace: Chrome trace-event JSON, steps that add up to the step, results unchanged") {
  const auto b = make_batch(128, 2);
  ty::trace_recorder rec(ty::trace_recorder::options{.skip = 1, .runs = 3});
  ty::session<seed_policy> traced(ty::session_options{.threads = 2, .seed = 3, .trace = &rec});
  ty::session<seed_policy> plain(ty::session_options{.threads = 2, .seed = 3});
  traced.initialize(mnist::train_op);
  plain.initialize(mnist::train_op);
  double wall = 0;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    const float l1 = train_step(traced, b)[0];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (k >= 1 && k < 4)
      wall += dt;
    const float l2 = train_step(plain, b)[0];
    CHECK(l1 == l2); // bit for bit
  }
  std::vector<std::string> v1, v2;
  const auto bytes_of = [](std::vector<std::string>& out) {
    return [&out](const auto& v) {
      out.push_back(std::string(v.name) + std::string(static_cast<const char*>(v.data), v.bytes));
    };
  };
  traced.for_each_variable(bytes_of(v1));
  plain.for_each_variable(bytes_of(v2));
  CHECK(v1.size() == traced.variable_count());
  CHECK(v1 == v2); // every variable, bit for bit
  CHECK(rec.runs_seen() == 5);
  CHECK(rec.runs_recorded() == 3);

  const auto events = rec.events();
  std::size_t runs = 0, steps = 0, transfers = 0;
  double step_time = 0, run_time = 0;
  std::map<std::uint64_t, std::pair<double, double>> per_run; // run -> (steps, span)
  std::set<std::string> views;
  for (const auto& e : events) {
    switch (e.what) {
    case ty::trace_event::type::run:
      ++runs;
      run_time += e.duration;
      per_run[e.run].second += e.duration;
      break;
    case ty::trace_event::type::step:
      ++steps;
      step_time += e.duration;
      per_run[e.run].first += e.duration;
      // Only a view (a result sharing its operand's buffer; an assign that takes its value's
      // buffer) moves no bytes.
      if (e.bytes == 0)
        views.insert(e.plan->kernel[e.node]);
      CHECK(e.run >= 1);
      CHECK(e.run <= 3);
      break;
    case ty::trace_event::type::transfer:
      ++transfers;
      step_time += e.duration;
      per_run[e.run].first += e.duration;
      break;
    default:
      break;
    }
  }
  CHECK(runs == 3);
  CHECK(per_run.size() == 3);
  for (const auto& k : views)
    CHECK_MESSAGE((k == "reshape" || k == "reshape_like" || k == "expand_dims" ||
                   k == "replica_mean" || k == "assign"),
                  k << " moved no bytes");
  CHECK(steps == 3 * traced.stats().steps);
  CHECK(transfers == 3 * P::transfers);
  // The steps and transfers account for the run, as measured around it.
  CHECK(step_time <= run_time);
  CHECK(run_time <= wall);
  // Within a run, the steps leave no gap worth a tenth of it: a step the trace left out would.
  // The best of the three runs counts, as the thread running the steps can lose its core
  // between two of them on a loaded machine (ctest -j2 beside other multi-threaded tests).
  double covered = 0;
  for (const auto& [run, t] : per_run)
    covered = std::max(covered, t.first / t.second);
  CHECK(covered >= 0.9);
  CHECK(covered <= 1.0 + 1e-9);

  // The file, checked by the committed validator; a broken copy fails it.
  const fs::path file = temp_dir() / "trace.json";
  ty::save_chrome_trace(rec, file);
  const std::string check = "python3 " TYPEFLOW_SOURCE_DIR "/scripts/check_trace.py ";
  const auto [ok, out] = run_command(check + file.string() + " --runs 3 --min-steps " +
                                     std::to_string(steps) + " 2>&1");
  CHECK_MESSAGE(ok == 0, out);
  {
    std::ifstream in(file);
    auto doc = nlohmann::json::parse(in);
    for (auto& e : doc["traceEvents"])
      if (e["ph"] == "X") {
        e["dur"] = -1;
        break;
      }
    std::ofstream(temp_dir() / "broken.json") << doc.dump();
  }
  const auto [bad, why] = run_command(check + (temp_dir() / "broken.json").string() + " 2>&1");
  CHECK(bad == 1);
  CHECK(why.find("dur -1") != std::string::npos);
}

TEST_CASE("the profile: FLOPs of the seed's convolutions and matmuls, per run") {
  const i64 n = 32;
  const auto b = make_batch(n, 4);
  ty::trace_recorder rec;
  ty::session<> s(ty::session_options{.threads = 1, .seed = 5, .trace = &rec});
  s.initialize(mnist::train_op);
  (void)train_step(s, b);
  (void)train_step(s, b);
  const ty::roofline machine{1, 10e9, 100e9};
  const auto p = ty::make_profile(rec, machine);
  CHECK(p.runs == 2);
  std::map<std::string, ty::profile::row> rows;
  double share = 0;
  for (const auto& r : p.rows) {
    rows[r.kind] = r;
    share += r.share;
  }
  CHECK(share <= 1.0 + 1e-9);
  for (std::size_t k = 1; k < p.rows.size(); ++k)
    CHECK(p.rows[k - 1].seconds >= p.rows[k].seconds);
  // conv1: 28x28x32 outputs of 5x5x1 taps; conv2: 14x14x64 of 5x5x32; each + bias + relu.
  const double N = static_cast<double>(n);
  const double conv = 2 * N * 28 * 28 * 32 * 25 + 2 * N * 28 * 28 * 32 +
                      2 * N * 14 * 14 * 64 * (25 * 32) + 2 * N * 14 * 14 * 64;
  REQUIRE(rows.count("conv2d+bias_add+relu") == 1);
  CHECK(rows["conv2d+bias_add+relu"].flops == doctest::Approx(conv));
  CHECK(rows["conv2d+bias_add+relu"].calls == 2);
  // local3 (3136 -> 1024) and local4 (1024 -> 10) with relu; softmax_linear (10 -> 10) without.
  const double dense_relu = 2 * N * 3136 * 1024 + 2 * N * 1024 + 2 * N * 1024 * 10 + 2 * N * 10;
  CHECK(rows["matmul+bias_add+relu"].flops == doctest::Approx(dense_relu));
  CHECK(rows["matmul+bias_add"].flops == doctest::Approx(2 * N * 10 * 10 + N * 10));
  // The filter gradients: the same taps as the forward convolutions.
  CHECK(rows["conv2d_backprop_filter"].flops ==
        doctest::Approx(2 * N * 28 * 28 * 32 * 25 + 2 * N * 14 * 14 * 64 * (25 * 32)));
  // Achieved rates are FLOPs and bytes over time, and the roof follows the intensity.
  const auto& c = rows["conv2d+bias_add+relu"];
  CHECK(c.gflops == doctest::Approx(c.flops / c.seconds / 1e9));
  CHECK(c.compute_bound == (c.flops / c.bytes > machine.flops / machine.bandwidth));
  const std::string table = p.str();
  CHECK(table.find("conv2d_backprop_filter") != std::string::npos);
  CHECK(p.markdown().find("| conv2d+bias_add+relu | 2 |") != std::string::npos);
}

TEST_CASE("a replicated run's trace: both towers' steps, on their devices, and the all-reduce") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 6>>;
  constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
  constexpr auto logits = ty::dense<"t/l1", 4, ty::uniform<-0.5, 0.5>>(x);
  constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
  constexpr auto train = ty::gradient_descent(ty::constant<0.1>).minimize(loss);
  ty::trace_recorder rec;
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> s(
      ty::session_options{.threads = 2, .seed = 1, .trace = &rec});
  s.initialize(train);
  ty::tensor<float> xs({8, 6});
  ty::tensor<std::int32_t> ys({8});
  for (i64 i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
  for (i64 i = 0; i < ys.size(); ++i)
    ys[i] = static_cast<std::int32_t>(i % 4);
  (void)s.run(ty::fetch(loss, train), ty::feed(x, xs), ty::feed(y, ys));
  std::map<int, std::size_t> steps_on;
  std::map<int, std::uint32_t> thread_of;
  std::size_t reduces = 0, runs = 0;
  for (const auto& e : rec.events()) {
    if (e.what == ty::trace_event::type::step) {
      ++steps_on[e.device.index];
      thread_of[e.device.index] = e.thread;
    }
    reduces += e.what == ty::trace_event::type::all_reduce;
    runs += e.what == ty::trace_event::type::run;
  }
  CHECK(runs == 1);
  CHECK(reduces == 1);
  CHECK(steps_on[0] > 0);
  CHECK(steps_on[1] > 0);
  CHECK(steps_on[0] > steps_on[1]); // the update runs once, in tower 0
  CHECK(thread_of[0] != thread_of[1]);
}
