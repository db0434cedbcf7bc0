// Fused elementwise loops: one loop per region, instantiated from the region's functor types.
// Every member of the region is computed once per element into a local (per-element common
// subexpressions); no intermediate buffer exists. Inputs are mapped into the output's index space
// by broadcasting strides; adjacent axes are coalesced, and the innermost axis runs as a
// contiguous loop over blocks (a broadcast input is splatted into a small block). When every
// input, member and the root are one floating type (or bool masks computed from it) and every op
// has a vector form (backend/cpu/simd.hpp), that loop runs on xsimd batches, the ragged end of a
// row included (padded), so each element gets the same arithmetic wherever it lies.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "../../core/pack.hpp"
#include "../../graph/flat.hpp"
#include "../common/broadcast.hpp"
#include "../common/element_eval.hpp"
#include "../common/value.hpp"
#include "simd.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

namespace detail {
template <class M>
struct member_op;
template <class Op, class C, class T, class... Refs>
struct member_op<graph::member<Op, C, T, Refs...>> {
  using type = Op;
};

template <class Op>
inline constexpr bool scalar_only = op_traits<Op>::scalar_only;

template <class Op>
struct no_vector_form_message {
  static constexpr typeflow::detail::msg_buf message() {
    typeflow::detail::msg_buf b;
    b << std::string_view("fused CPU loop: elementwise op ") << Op::name
      << std::string_view(" has no vector form: add batch_op<") << Op::name
      << std::string_view("> to backend/cpu/simd.hpp, or declare it scalar_only in the op");
    return b;
  }
};
} // namespace detail

using graph::member;
using graph::ref_const;
using graph::ref_input;
using graph::ref_local;

/// The fused loop of one region: members in topological order (the root last) over inputs of
/// dtypes `Ins...`, storing the root and the members that `Stores` names (pairs: member
/// position, plan position; graph::flat_region). Its template arguments hold only op types and
/// positions, never the nested node types, so its size does not grow with the depth of the graph.
template <class Out, class Ins, class Members, class Stores = std::index_sequence<>>
struct fused_kernel;

template <class Out, class... Ins, class... Ms, std::size_t... St>
struct fused_kernel<Out, type_list<Ins...>, type_list<Ms...>, std::index_sequence<St...>> {
  using out_t = Out;
  static constexpr std::size_t n_in = sizeof...(Ins);
  /// The members stored besides the root (merged outputs), each of the root's dtype and shape.
  static constexpr std::size_t n_out = sizeof...(St) / 2;
  static constexpr std::array<std::size_t, n_out> store_member = [] {
    constexpr std::size_t st[] = {St..., 0};
    std::array<std::size_t, n_out> m{};
    for (std::size_t q = 0; q < n_out; ++q)
      m[q] = st[2 * q];
    return m;
  }();
  using outs_t = std::array<out_t*, n_out>;
  static_assert(
      [] {
        constexpr bool same[] = {std::is_same_v<typename Ms::value_type, out_t>...};
        for (std::size_t m : store_member)
          if (!same[m])
            return false;
        return true;
      }(),
      "fused CPU loop: a stored member's dtype differs from the root's");
  static constexpr std::int64_t block = 256;
  using in_tuple = pack<Ins...>;
  using val_tuple = pack<typename Ms::value_type...>;

  /// The value of the root at one element, given the inputs' values there (the evaluator the
  /// CUDA kernel runs too).
  static out_t eval(Ins... x) {
    return backend::element_eval<Out, type_list<Ins...>, type_list<Ms...>>::eval(x...);
  }

#if defined(TYPEFLOW_HAS_XSIMD)
  // The vector loop: values are batches of out_t, or masks for bool members.
  template <class M>
  using batch_of = std::conditional_t<std::is_same_v<typename M::value_type, bool>,
                                      simd::mask<out_t>, simd::vec<out_t>>;
  using bval_tuple = pack<batch_of<Ms>...>;
  template <class>
  using vec_for = simd::vec<out_t>;
  using bin_tuple = pack<vec_for<Ins>...>;

  template <std::size_t J>
  static auto bvalue_of(ref_local<J>*, const bval_tuple& v, const bin_tuple&) {
    return pack_get<J>(v);
  }
  template <std::size_t K>
  static auto bvalue_of(ref_input<K>*, const bval_tuple&, const bin_tuple& in) {
    return pack_get<K>(in);
  }
  template <std::uint64_t Bits, class T>
  static auto bvalue_of(ref_const<Bits, T>*, const bval_tuple&, const bin_tuple&) {
    return simd::vec<out_t>(static_cast<out_t>(static_cast<T>(std::bit_cast<double>(Bits))));
  }
  template <class Op, class C, class T, class... Refs>
  static auto bcompute(member<Op, C, T, Refs...>*, const bval_tuple& v, const bin_tuple& in)
      -> decltype(simd::batch_op<Op>::template eval<out_t>(bvalue_of(static_cast<Refs*>(nullptr), v,
                                                                     in)...)) {
    return simd::batch_op<Op>::template eval<out_t>(
        bvalue_of(static_cast<Refs*>(nullptr), v, in)...);
  }
  template <class M>
  static constexpr bool member_vectorizes() {
    if constexpr (!std::is_same_v<typename M::compute, out_t>)
      return false;
    else
      return requires(const bval_tuple& v, const bin_tuple& in) {
        { bcompute(static_cast<M*>(nullptr), v, in) } -> std::same_as<batch_of<M>>;
      };
  }
  template <std::size_t... M>
  static bval_tuple beval_all(const bin_tuple& in, std::index_sequence<M...>) {
    bval_tuple v{};
    [[maybe_unused]] const int seq[] = {
        ((pack_get<M>(v) = bcompute(static_cast<Ms*>(nullptr), v, in)), 0)..., 0};
    return v;
  }
  template <std::size_t... M>
  static simd::vec<out_t> beval(const bin_tuple& in, std::index_sequence<M...> seq) {
    return pack_get<sizeof...(Ms) - 1>(beval_all(in, seq));
  }
  /// The root and the stored members of one batch, at element j of each output (with
  /// non-temporal stores where Stream: every output aligned).
  template <bool Stream, std::size_t... Q>
  static void bstore(const bval_tuple& v, out_t* out, const outs_t& so, std::int64_t j,
                     std::index_sequence<Q...>) {
    const auto put = [](const simd::vec<out_t>& x, out_t* dst) {
      if constexpr (Stream)
        simd::stream_store(dst, x);
      else
        x.store_unaligned(dst);
    };
    put(pack_get<sizeof...(Ms) - 1>(v), out + j);
    [[maybe_unused]] const int seq[] = {(put(pack_get<store_member[Q]>(v), so[Q] + j), 0)..., 0};
  }
  static constexpr bool vectorized = std::is_floating_point_v<out_t> &&
                                     all_of({std::is_same_v<Ins, out_t>..., true}) &&
                                     all_of({member_vectorizes<Ms>()..., true});

  // A region that would run on vectors but for one op's missing vector form is a compile
  // error, not a silent scalar loop for the whole region.
  template <class M>
  static constexpr bool lacks_vector_form() {
    using Op = typename detail::member_op<M>::type;
    return std::is_same_v<typename M::compute, out_t> && requires {
      simd::batch_op<Op>::missing;
    }
    &&!detail::scalar_only<Op>;
  }
  static constexpr std::size_t first_without_vector_form = [] {
    if constexpr (std::is_floating_point_v<out_t> &&
                  all_of({std::is_same_v<Ins, out_t>..., true})) {
      const bool lacks[] = {lacks_vector_form<Ms>()...};
      for (std::size_t k = 0; k < sizeof...(Ms); ++k)
        if (lacks[k])
          return k;
    }
    return sizeof...(Ms);
  }();
  /// Whether an op of the region has no vector form (the session rejects such a plan, naming
  /// op_without_vector_form, before it instantiates the kernel).
  static constexpr bool lacks_a_vector_form = first_without_vector_form < sizeof...(Ms);
  using op_without_vector_form = typename detail::member_op<
      pack_element_t<lacks_a_vector_form ? first_without_vector_form : 0, pack<Ms...>>>::type;
#else
  static constexpr bool vectorized = false;
  static constexpr bool lacks_a_vector_form = false;
  using op_without_vector_form = void;
#endif

  template <std::size_t... K>
  // (No __restrict on the outputs: a loop may write over an input that dies with it,
  // context::allocate_in_place.)
  static void inner(out_t* out, std::int64_t len, const pack<const Ins*...>& p, bool stream,
                    std::index_sequence<K...>, const outs_t& so = {}) {
    if constexpr (n_out > 0) {
      inner_stores(out, so, len, p, stream, std::index_sequence<K...>{});
    }
#if defined(TYPEFLOW_HAS_XSIMD)
    else if constexpr (vectorized) {
      using B = simd::vec<out_t>;
      constexpr std::int64_t W = B::size;
      const auto members = std::index_sequence_for<Ms...>{};
      std::int64_t j = 0;
      if (stream && reinterpret_cast<std::uintptr_t>(out) % sizeof(B) == 0)
        for (; j + W <= len; j += W)
          simd::stream_store(out + j,
                             beval(bin_tuple{{B::load_unaligned(pack_get<K>(p) + j)}...}, members));
      for (; j + W <= len; j += W)
        beval(bin_tuple{{B::load_unaligned(pack_get<K>(p) + j)}...}, members)
            .store_unaligned(out + j);
      if (j < len) { // the ragged end, padded with zeros
        const std::int64_t rest = len - j;
        [[maybe_unused]] auto load_rest = [&](const out_t* src) {
          alignas(64) std::array<out_t, W> lane{};
          std::copy_n(src + j, rest, lane.data());
          return B::load_aligned(lane.data());
        };
        alignas(64) std::array<out_t, W> res;
        beval(bin_tuple{{load_rest(pack_get<K>(p))}...}, members).store_aligned(res.data());
        std::copy_n(res.data(), rest, out + j);
      }
    }
#endif
    else { // the scalar loop, instantiated only for a region that does not run on vectors
      (void)stream;
      for (std::int64_t j = 0; j < len; ++j)
        out[j] = eval(pack_get<K>(p)[j]...);
    }
  }

  /// inner() for a region with merged outputs: every output stored per element.
  template <std::size_t... K>
  static void inner_stores(out_t* out, const outs_t& so, std::int64_t len,
                           const pack<const Ins*...>& p, bool stream, std::index_sequence<K...>) {
    const auto outs = std::make_index_sequence<n_out>{};
#if defined(TYPEFLOW_HAS_XSIMD)
    if constexpr (vectorized) {
      using B = simd::vec<out_t>;
      constexpr std::int64_t W = B::size;
      const auto members = std::index_sequence_for<Ms...>{};
      const auto aligned = [](const out_t* q) {
        return reinterpret_cast<std::uintptr_t>(q) % sizeof(B) == 0;
      };
      bool nt = stream && aligned(out);
      for (out_t* q : so)
        nt = nt && aligned(q);
      std::int64_t j = 0;
      if constexpr (simd::has_stream_store<out_t>)
        if (nt)
          for (; j + W <= len; j += W)
            bstore<true>(beval_all(bin_tuple{{B::load_unaligned(pack_get<K>(p) + j)}...}, members),
                         out, so, j, outs);
      for (; j + W <= len; j += W)
        bstore<false>(beval_all(bin_tuple{{B::load_unaligned(pack_get<K>(p) + j)}...}, members),
                      out, so, j, outs);
      if (j < len) { // the ragged end, padded with zeros
        const std::int64_t rest = len - j;
        [[maybe_unused]] auto load_rest = [&](const out_t* src) {
          alignas(64) std::array<out_t, W> lane{};
          std::copy_n(src + j, rest, lane.data());
          return B::load_aligned(lane.data());
        };
        alignas(64) std::array<out_t, W*(n_out + 1)> res;
        outs_t lanes{};
        for (std::size_t q = 0; q < n_out; ++q)
          lanes[q] = res.data() + W * (q + 1);
        bstore<false>(beval_all(bin_tuple{{load_rest(pack_get<K>(p))}...}, members), res.data(),
                      lanes, 0, outs);
        std::copy_n(res.data(), rest, out + j);
        for (std::size_t q = 0; q < n_out; ++q)
          std::copy_n(lanes[q], rest, so[q] + j);
      }
    } else
#endif
    { // the scalar loop, instantiated only for a region that does not run on vectors
      (void)stream;
      using eval_t = backend::element_eval<Out, type_list<Ins...>, type_list<Ms...>>;
      for (std::int64_t j = 0; j < len; ++j) {
        const auto v = eval_t::eval_all(pack_get<K>(p)[j]...);
        out[j] = pack_get<sizeof...(Ms) - 1>(v);
        [&]<std::size_t... Q>(std::index_sequence<Q...>) {
          [[maybe_unused]] const int seq[] = {((so[Q][j] = pack_get<store_member[Q]>(v)), 0)..., 0};
        }
        (outs);
      }
    }
  }

  /// out (dims `od`) = root, reading `in[k]` with its run-time dims; so[q] (dims `od`) = the
  /// q-th stored member.
  static void run(thread_pool& pool, out_t* out, const backend::rt_dims& od,
                  const std::array<const backend::rt_value*, n_in>& in, const outs_t& so = {}) {
    std::array<const backend::rt_dims*, n_in> in_dims{};
    for (std::size_t k = 0; k < n_in; ++k)
      in_dims[k] = &in[k]->dims;
    const backend::loop_geometry<n_in> geo(od, in_dims);
    const std::int64_t total = od.numel();
    if (total == 0)
      return;
    const std::int64_t inner_n = geo.groups ? geo.dims[geo.groups - 1] : 1;
    const std::int64_t blocks_per_row = (inner_n + block - 1) / block;
    const std::int64_t rows = total / inner_n;
    const std::int64_t n_blocks = rows * blocks_per_row;
    // A loop whose operands and result together exceed the last-level cache writes its result
    // with non-temporal stores: it would be evicted before its reader runs anyway, and the
    // stores then skip reading each line first.
    bool stream = false;
#if defined(TYPEFLOW_HAS_XSIMD)
    if constexpr (vectorized && simd::has_stream_store<out_t>) {
      std::size_t bytes = static_cast<std::size_t>(total) * sizeof(out_t) * (1 + n_out);
      for (std::size_t k = 0; k < n_in; ++k)
        bytes += static_cast<std::size_t>(in[k]->dims.numel()) * sizeof(out_t);
      stream = bytes > simd::last_level_cache_bytes();
    }
#endif
    auto body = [&](std::int64_t b0, std::int64_t b1) {
      pack<std::array<Ins, block>...> splat;
      for (std::int64_t b = b0; b < b1; ++b) {
        const std::int64_t row = b / blocks_per_row, j0 = (b % blocks_per_row) * block;
        const std::int64_t len = std::min(block, inner_n - j0);
        auto ptrs = make_ptrs(in, row_offsets(geo, row), geo, j0, len, splat,
                              std::index_sequence_for<Ins...>{});
        const std::int64_t at = row * inner_n + j0;
        outs_t shifted{};
        for (std::size_t q = 0; q < n_out; ++q)
          shifted[q] = so[q] + at;
        inner(out + at, len, ptrs, stream, std::index_sequence_for<Ins...>{}, shifted);
      }
#if defined(TYPEFLOW_HAS_XSIMD)
      if (stream)
        simd::stream_fence(); // before the join publishes the result to other threads
#endif
    };
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / block);
    pool.parallel_for(n_blocks, grain, body);
  }

  /// Input `input` of a region read from a piece of it (graph::chained): `data` holds its
  /// elements [begin, ...) of the row-major order of the output, whose dims it has.
  struct piece_input {
    std::size_t input = n_in; ///< none
    const void* data = nullptr;
    std::int64_t begin = 0;
  };

  /// Elements [begin, end) of the root, in the row-major order of `od`, into out[0, end - begin)
  /// on the calling thread (a reduction reading the region in pieces: graph::prologue; a region
  /// evaluated on the pieces of an input, `piece`: graph::chained), with non-temporal stores
  /// where `stream` (the caller fences). Each element gets the same arithmetic as in run().
  static void run_range(out_t* out, const backend::rt_dims& od,
                        const std::array<const backend::rt_value*, n_in>& in,
                        const backend::loop_geometry<n_in>& geo, std::int64_t begin,
                        std::int64_t end, const piece_input& piece = {}, bool stream = false) {
    (void)od;
    const std::int64_t inner_n = geo.groups ? geo.dims[geo.groups - 1] : 1;
    pack<std::array<Ins, block>...> splat;
    for (std::int64_t i = begin; i < end;) {
      const std::int64_t row = i / inner_n, j0 = i % inner_n;
      const std::int64_t len = std::min({block, inner_n - j0, end - i});
      auto ptrs = make_ptrs(in, row_offsets(geo, row), geo, j0, len, splat,
                            std::index_sequence_for<Ins...>{}, &piece, i);
      inner(out + (i - begin), len, ptrs, stream, std::index_sequence_for<Ins...>{});
      i += len;
    }
  }

private:
  /// Each input's offset at the start of row `row` (every axis but the innermost).
  static std::array<std::int64_t, n_in> row_offsets(const backend::loop_geometry<n_in>& geo,
                                                    std::int64_t row) {
    std::array<std::int64_t, n_in> off{};
    for (std::size_t gi = geo.groups > 0 ? geo.groups - 1 : 0; gi-- > 0;) {
      const std::int64_t idx = row % geo.dims[gi];
      row /= geo.dims[gi];
      for (std::size_t k = 0; k < n_in; ++k)
        off[k] += idx * geo.strides[k][gi];
    }
    return off;
  }
  template <class Splat, std::size_t... K>
  static pack<const Ins*...> make_ptrs(const std::array<const backend::rt_value*, n_in>& in,
                                       const std::array<std::int64_t, n_in>& off,
                                       const backend::loop_geometry<n_in>& geo, std::int64_t j0,
                                       std::int64_t len, Splat& splat, std::index_sequence<K...>,
                                       const piece_input* piece = nullptr, std::int64_t at = 0) {
    const std::size_t last = geo.groups ? geo.groups - 1 : 0;
    [[maybe_unused]] auto one = [&]<std::size_t k>(std::integral_constant<std::size_t, k>) {
      using T = pack_element_t<k, in_tuple>;
      if (piece && piece->input == k) // the output's dims: element `at` is the piece's at - begin
        return static_cast<const T*>(piece->data) + (at - piece->begin);
      const T* base = static_cast<const T*>(in[k]->data) + off[k];
      const std::int64_t s = geo.groups ? geo.strides[k][last] : 0;
      if (s == 1)
        return base + j0;
      auto& buf = pack_get<k>(splat);
      std::fill_n(buf.data(), len, base[0]);
      return static_cast<const T*>(buf.data());
    };
    return {{one(std::integral_constant<std::size_t, K>{})}...};
  }
};

} // namespace typeflow::cpu_backend
