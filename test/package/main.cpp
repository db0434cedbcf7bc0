// A consumer of typeflow as a package, header-only (no TYPEFLOW_SEPARATE_COMPILATION): a run, a
// checkpoint saved and restored, and a step trace written. The last two call functions that
// header-only mode defers until a program calls them (TYPEFLOW_DECL_DEFERRED,
// typeflow/core/compiled.hpp), so this is where they are instantiated in that mode.
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <typeflow/typeflow.hpp>
#include <unistd.h>
namespace ty = typeflow;
int main() {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<3>, ty::fill<2.0>>;
  constexpr auto y = ty::sum(x * w);
  ty::trace_recorder rec;
  ty::session s(ty::session_options{.trace = &rec});
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
  if (r.item() != 42.0f) {
    std::cerr << "consumer: wrong result " << r.item() << "\n";
    return 1;
  }

  // w = 2 saved, overwritten with 1 (y = 21), restored (y = 42 again).
  const auto file = std::filesystem::temp_directory_path() /
                    ("typeflow_consumer_" + std::to_string(::getpid()) + ".safetensors");
  ty::save_checkpoint(s, file);
  s.run(ty::fetch(ty::assign(w, w * ty::constant<0.5>)));
  auto [r1] = s.run(ty::fetch(y), ty::feed(x, in));
  ty::restore_checkpoint(s, file);
  auto [r2] = s.run(ty::fetch(y), ty::feed(x, in));
  std::filesystem::remove(file);
  if (r1.item() != 21.0f || r2.item() != 42.0f) {
    std::cerr << "consumer: checkpoint round trip gave " << r1.item() << ", " << r2.item()
              << " (expected 21, 42)\n";
    return 1;
  }

  std::ostringstream trace;
  ty::write_chrome_trace(trace, rec.events());
  if (trace.str().find("\"traceEvents\"") == std::string::npos) {
    std::cerr << "consumer: the trace has no traceEvents: " << trace.str().substr(0, 200) << "\n";
    return 1;
  }
  std::cout << "consumer ok: " << r.item() << "\n";
}
