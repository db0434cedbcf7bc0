// What the compiler can see wrong with running a plan, checked before anything of the run is
// instantiated: an unfed placeholder, a placeholder fed twice, a variable declared twice, a
// node the strict placement cannot place, a GPU step without a backend, a CPU step without a
// kernel, a fused CPU region with an op that has no vector form. Each is one error whose first
// line says what is wrong (check_plan), and the run instantiates nothing else of such a plan.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../backend/common/backend.hpp"
#include "../backend/cpu/backend.hpp"
#include "../backend/cuda/kernels.hpp"
#include "../compile/plan.hpp"
#include "../device/device.hpp"
#include "../graph/flat.hpp"
#include "../ops/repeat.hpp"

namespace typeflow::detail {

template <class P>
struct unfed_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("run: placeholder \"") << P::op::name
      << std::string_view("\" is needed by the fetches but not fed");
    return b;
  }
};

template <class P>
struct fed_twice_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("feed: placeholder \"") << P::op::name
      << std::string_view("\" is fed twice");
    return b;
  }
};

template <class Op, class D>
struct no_kernel_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("placement: op ") << Op::name
      << std::string_view(" has no kernel on device ") << D::type << std::string_view(":")
      << static_cast<std::int64_t>(D::index)
      << std::string_view(" and soft placement is off (strict policy)");
    return b;
  }
};

template <class Op>
struct no_cpu_kernel_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("session: op ") << Op::name
      << std::string_view(" is placed on the CPU but has no CPU kernel (add one under "
                          "backend/cpu/kernels/, see ops/contract.hpp)");
    return b;
  }
};

template <class Op, class D>
struct no_backend_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("session: op ") << Op::name << std::string_view(" is placed on GPU:")
      << static_cast<std::int64_t>(D::index)
      << std::string_view(", which has no backend here: the CUDA backend comes with "
                          "typeflow/typeflow.hpp in a translation unit compiled by nvcc");
    return b;
  }
};

/// What the session checks of each step before instantiating it: a GPU step needs a device
/// backend, a CPU kernel step a CPU kernel, a fused CPU region a vector form for every op.
template <class D, class Flat, class Region>
struct step_check {
  static constexpr bool no_backend = false, no_cpu_kernel = false, no_vector_form = false;
  using op = void;
};
/// What a fused region on device D needs of its ops (the backend says; none without one).
template <class D, class Region, bool = has_device_backend<D>>
struct region_vector_form {
  static constexpr bool missing = false;
  using op = void;
};
template <class D, class Region>
struct region_vector_form<D, Region, true>
    : device_backend<D>::template vector_form<std::remove_pointer_t<Region>> {};
/// Whether device D's backend has a kernel for a step (true without a backend: that is
/// no_backend's error).
template <class D, graph::step_kind K, class Op, class T, class Region, class... Refs>
consteval bool backend_has_kernel() {
  if constexpr (has_device_backend<D>)
    return device_backend<D>::template has_kernel<K, Op, T, Region, Refs...>;
  else
    return true;
}
template <class D, graph::step_kind K, class Op, class T, std::size_t R, class... Refs,
          class Region>
struct step_check<D, graph::flat_node<K, Op, T, R, Refs...>, Region*> {
  static constexpr bool no_backend = !has_device_backend<D>;
  static constexpr bool no_cpu_kernel = [] {
    if constexpr (K == graph::step_kind::kernel && !control_flow_op<Op>)
      return !backend_has_kernel<D, K, Op, T, Region, Refs...>();
    else
      return false;
  }();
  static constexpr bool no_vector_form = region_vector_form<D, Region>::missing;
  using op = std::conditional_t<no_vector_form, typename region_vector_form<D, Region>::op, Op>;
};

template <class V>
struct duplicate_variable_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("variable \"") << V::op::name
      << std::string_view("\" is declared twice with different dtype, shape or initializer");
    return b;
  }
};

/// What step I's local form reads besides its operands (see compile::plan's local forms): the
/// region of a fused kernel, an epilogue or a prologue, as a pointer type; void* for none.
template <class P, std::size_t I, graph::step_kind K = P::layout.step[I],
          bool Elementwise = P::fact.elementwise[I]>
struct step_region_of {
  using type = void*;
};
template <class P, std::size_t I>
struct step_region_of<P, I, graph::step_kind::kernel, true> {
  using type = typename P::template local_region<I>*;
};
template <class P, std::size_t I, bool E>
struct step_region_of<P, I, graph::step_kind::epilogue, E> {
  using type = typename P::template local_epilogue<I>*;
};
template <class P, std::size_t I, bool E>
struct step_region_of<P, I, graph::step_kind::prologue, E> {
  using type = typename P::template local_prologue<I>*;
};
template <class P, std::size_t I, bool E>
struct step_region_of<P, I, graph::step_kind::chained, E> {
  using type = typename P::template local_chained<I>*;
};

template <class Ph, class... Feeds>
constexpr std::size_t feed_count() {
  return (std::size_t{0} + ... + std::is_same_v<typename Feeds::placeholder, Ph>);
}
/// Node I's variable name, if it is a variable (indexed_table's generator).
struct variable_name_entry {
  std::string_view name;
  bool variable = false;
};
template <class P>
struct variable_name_at {
  template <std::size_t I>
  struct at {
    using N = typename P::template node<I>;
    static constexpr variable_name_entry value{variable_name<typename N::op>::value,
                                               is_variable_t<N>::value};
  };
};
template <class P>
constexpr std::size_t first_clash() {
  // A table built in chunks, not a pack expansion over the nodes (core/pack.hpp's
  // indexed_table).
  const auto entries =
      indexed_table<variable_name_entry, P::size, variable_name_at<P>::template at>();
  std::array<std::string_view, P::size> names{};
  std::array<bool, P::size> var{};
  for (std::size_t i = 0; i < P::size; ++i) {
    names[i] = entries[i].name;
    var[i] = entries[i].variable;
  }
  // The variables sorted by name (then position): a clash is two neighbours of one name, and
  // the first variable that has a namesake is the least position among such neighbours.
  // O(v log v): pairs of variables were quadratic, past g++'s constexpr limit at 300 variables.
  std::array<std::size_t, P::size> vars{};
  std::size_t nv = 0;
  for (std::size_t a = 0; a < P::size; ++a)
    if (var[a])
      vars[nv++] = a;
  std::sort(vars.begin(), vars.begin() + nv, [&](std::size_t x, std::size_t y) {
    return names[x] < names[y] || (names[x] == names[y] && x < y);
  });
  std::size_t first = P::size;
  for (std::size_t k = 0; k + 1 < nv; ++k)
    if (names[vars[k]] == names[vars[k + 1]])
      first = std::min(first, vars[k]);
  return first;
}
/// The first problem of running plan P with these feeds that the compiler can see.
enum class plan_problem {
  none,
  unfed,
  fed_twice,
  duplicate_variable,
  strict_placement,
  no_backend,
  no_cpu_kernel,
  no_vector_form
};
template <class P, class... Feeds>
struct plan_check {
  static constexpr std::size_t unfed = [] {
    std::array<bool, P::size> fed{};
    auto mark = [&]<class Ph>(Ph*) {
      if constexpr (P::template contains_c<Ph>::value)
        fed[P::template index_c<Ph>::value] = true;
    };
    (mark(static_cast<typename Feeds::placeholder*>(nullptr)), ...);
    (void)mark;
    for (std::size_t i = 0; i < P::size; ++i)
      if (P::fact.placeholder[i] && !fed[i])
        return i;
    return P::size;
  }();
  static constexpr bool fed_twice =
      ((feed_count<typename Feeds::placeholder, Feeds...>() > 1) || ...);
  static constexpr std::size_t clash = first_clash<P>();
  static constexpr std::size_t strict = P::placement.strict_violation;
  static constexpr bool strict_bad = strict != P::size && strict != static_cast<std::size_t>(-1);
  template <std::size_t I>
  using step = step_check<typename P::template device<I>, typename P::template local_flat<I>,
                          typename step_region_of<P, I>::type>;
  /// Step I's three checks (indexed_table's generator).
  template <std::size_t I>
  struct step_flags_at {
    static constexpr std::array<bool, 3> value{step<I>::no_backend, step<I>::no_cpu_kernel,
                                               step<I>::no_vector_form};
  };
  static constexpr std::array<std::size_t, 3> first_steps() {
    // A table built in chunks, not a pack expansion over the steps (core/pack.hpp's
    // indexed_table).
    const auto flags = indexed_table<std::array<bool, 3>, P::size, step_flags_at>();
    std::array<std::size_t, 3> r{P::size, P::size, P::size};
    for (std::size_t i = P::size; i-- > 0;)
      for (std::size_t k = 0; k < 3; ++k)
        r[k] = flags[i][k] ? i : r[k];
    return r;
  }
  static constexpr std::array<std::size_t, 3> steps = first_steps();
  static constexpr plan_problem problem = unfed < P::size      ? plan_problem::unfed
                                          : fed_twice          ? plan_problem::fed_twice
                                          : clash < P::size    ? plan_problem::duplicate_variable
                                          : strict_bad         ? plan_problem::strict_placement
                                          : steps[0] < P::size ? plan_problem::no_backend
                                          : steps[1] < P::size ? plan_problem::no_cpu_kernel
                                          : steps[2] < P::size ? plan_problem::no_vector_form
                                                               : plan_problem::none;
};

/// The first placeholder fed twice (void: none).
template <class... Feeds>
struct first_fed_twice {
  using type = void;
};
template <class F, class... Feeds>
struct first_fed_twice<F, Feeds...> {
  using type =
      std::conditional_t<(std::is_same_v<typename F::placeholder, typename Feeds::placeholder> ||
                          ...),
                         typename F::placeholder, typename first_fed_twice<Feeds...>::type>;
};

/// Rejects a plan with a problem: one error, whose first line says what is wrong. The run
/// instantiates nothing else of such a plan (no cascade of errors below it).
template <class Placement, class P, class... Feeds>
constexpr void check_plan() {
  using C = plan_check<P, Feeds...>;
  if constexpr (C::problem == plan_problem::unfed) {
    using invalid [[maybe_unused]] = reject<unfed_message<typename P::template node<C::unfed>>>;
  } else if constexpr (C::problem == plan_problem::fed_twice) {
    using invalid [[maybe_unused]] =
        reject<fed_twice_message<typename first_fed_twice<Feeds...>::type>>;
  } else if constexpr (C::problem == plan_problem::duplicate_variable) {
    using invalid [[maybe_unused]] =
        reject<duplicate_variable_message<typename P::template node<C::clash>>>;
  } else if constexpr (C::problem == plan_problem::strict_placement) {
    using N = typename P::template node<C::strict>;
    using invalid [[maybe_unused]] =
        reject<no_kernel_message<typename N::op, typename Placement::template device<N>>>;
  } else if constexpr (C::problem == plan_problem::no_backend) {
    using invalid [[maybe_unused]] =
        reject<no_backend_message<typename P::template node<C::steps[0]>::op,
                                  typename P::template device<C::steps[0]>>>;
  } else if constexpr (C::problem == plan_problem::no_cpu_kernel) {
    using invalid [[maybe_unused]] =
        reject<no_cpu_kernel_message<typename P::template node<C::steps[1]>::op>>;
  } else if constexpr (C::problem == plan_problem::no_vector_form) {
    using invalid [[maybe_unused]] = reject<
        cpu_backend::detail::no_vector_form_message<typename C::template step<C::steps[2]>::op>>;
  }
}

} // namespace typeflow::detail
