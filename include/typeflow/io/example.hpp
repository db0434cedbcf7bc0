// tf.train.Example without a protobuf code generator: the wire format needs only varints,
// length-delimited fields and fixed32/64 (a generator and its runtime would be a dependency for
// three small messages). The messages, from tensorflow/core/example/{example,feature}.proto:
//   Example   { Features features = 1; }
//   Features  { map<string, Feature> feature = 1; }       map entry: { key = 1; value = 2; }
//   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                            Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//   Int64List { repeated int64 value = 1 [packed]; }
// Decoding follows protobuf's rules: unknown fields are skipped, a later map entry for the same
// key replaces an earlier one, the last member of a oneof wins, repeated scalars may come packed
// or unpacked (or both). Any malformation throws typeflow::error naming where.
//
// A typed feature spec (tf.io.FixedLenFeature / VarLenFeature) turns a record into values:
//   using image = io::fixed_len<"image_raw", io::bytes, shape<>>;
//   using label = io::fixed_len<"label", std::int64_t, shape<>>;
//   auto [img, lbl] = io::parse_example<image, label>(record, "record 7 of train.tfrecord");
#pragma once

#include "../core/compiled.hpp"
#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/shape.hpp"
#include "../core/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace typeflow::io {

// ---- wire format -------------------------------------------------------------------------

namespace detail {

/// Sequential reader of protobuf wire data; every read checks the bounds.
class pb_reader {
public:
  explicit pb_reader(std::string_view s)
      : p_(reinterpret_cast<const unsigned char*>(s.data())), end_(p_ + s.size()) {}
  bool done() const { return p_ == end_; }
  std::uint64_t varint(const char* what) {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_)
        throw error(std::string("example: truncated varint in ") + what);
      const unsigned char b = *p_++;
      v |= std::uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80u)) {
        if (shift == 63 && b > 1)
          throw error(std::string("example: varint over 64 bits in ") + what);
        return v;
      }
    }
    throw error(std::string("example: varint over 10 bytes in ") + what);
  }
  std::string_view bytes(const char* what) {
    const std::uint64_t n = varint(what);
    if (n > static_cast<std::uint64_t>(end_ - p_))
      throw error(std::string("example: length ") + std::to_string(n) + " in " + what +
                  " runs past the end of its message (" + std::to_string(end_ - p_) +
                  " bytes left)");
    std::string_view s(reinterpret_cast<const char*>(p_), static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  template <class T>
  T fixed(const char* what) {
    if (static_cast<std::size_t>(end_ - p_) < sizeof(T))
      throw error(std::string("example: truncated fixed") + std::to_string(8 * sizeof(T)) + " in " +
                  what);
    T v;
    std::memcpy(&v, p_, sizeof(T)); // little-endian on the wire, as on x86 and ARM
    p_ += sizeof(T);
    return v;
  }
  /// Skips a field of wire type `wt` (groups, deprecated, are refused).
  void skip(std::uint32_t wt, const char* what) {
    switch (wt) {
    case 0:
      (void)varint(what);
      return;
    case 1:
      (void)fixed<std::uint64_t>(what);
      return;
    case 2:
      (void)bytes(what);
      return;
    case 5:
      (void)fixed<std::uint32_t>(what);
      return;
    default:
      throw error(std::string("example: wire type ") + std::to_string(wt) + " in " + what);
    }
  }
  /// The next field's (number, wire type).
  std::pair<std::uint64_t, std::uint32_t> tag(const char* what) {
    const std::uint64_t k = varint(what);
    if ((k >> 3) == 0)
      throw error(std::string("example: field number 0 in ") + what);
    return {k >> 3, static_cast<std::uint32_t>(k & 7)};
  }

private:
  const unsigned char* p_;
  const unsigned char* end_;
};

inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
inline void put_tag(std::string& out, std::uint64_t field, std::uint32_t wt) {
  put_varint(out, (field << 3) | wt);
}
inline void put_bytes(std::string& out, std::uint64_t field, std::string_view s) {
  put_tag(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

} // namespace detail

/// The kind of a feature's list.
enum class feature_kind { none, bytes, floats, int64s };

inline const char* kind_name(feature_kind k) {
  switch (k) {
  case feature_kind::bytes:
    return "bytes_list";
  case feature_kind::floats:
    return "float_list";
  case feature_kind::int64s:
    return "int64_list";
  default:
    return "no list";
  }
}

/// One feature of a serialized Example, undecoded: views into the record.
struct feature_view {
  std::string_view name;
  feature_kind kind = feature_kind::none;
  std::string_view list; ///< the serialized BytesList, FloatList or Int64List
};

/// The features of a serialized tf.train.Example (views into `record`, which must outlive it).
class example_view {
public:
  example_view() = default;
  explicit example_view(std::string_view record) { parse(record); }

  /// Parses `record`, replacing what was there (the feature vector's capacity is reused).
  void parse(std::string_view record);

  /// The feature called `name`, or nullptr.
  const feature_view* find(std::string_view name) const {
    for (const auto& f : features_)
      if (f.name == name)
        return &f;
    return nullptr;
  }
  std::span<const feature_view> features() const { return features_; }

private:
  void add(const feature_view& f) {
    for (auto& g : features_)
      if (g.name == f.name) {
        g = f; // a later map entry replaces an earlier one
        return;
      }
    features_.push_back(f);
  }
  std::vector<feature_view> features_;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void example_view::parse(std::string_view record) {
  features_.clear();
  detail::pb_reader ex(record);
  while (!ex.done()) {
    const auto [field, wt] = ex.tag("Example");
    if (field != 1 || wt != 2) {
      ex.skip(wt, "Example");
      continue;
    }
    detail::pb_reader fs(ex.bytes("Example.features"));
    while (!fs.done()) {
      const auto [ff, fwt] = fs.tag("Features");
      if (ff != 1 || fwt != 2) {
        fs.skip(fwt, "Features");
        continue;
      }
      feature_view f;
      detail::pb_reader entry(fs.bytes("a Features.feature entry"));
      while (!entry.done()) {
        const auto [ef, ewt] = entry.tag("a Features.feature entry");
        if (ef == 1 && ewt == 2) {
          f.name = entry.bytes("a feature name");
        } else if (ef == 2 && ewt == 2) {
          detail::pb_reader feat(entry.bytes("a Feature"));
          while (!feat.done()) {
            const auto [kf, kwt] = feat.tag("a Feature");
            if (kf >= 1 && kf <= 3 && kwt == 2) {
              f.kind = static_cast<feature_kind>(kf);
              f.list = feat.bytes("a feature list");
            } else {
              feat.skip(kwt, "a Feature");
            }
          }
        } else {
          entry.skip(ewt, "a Features.feature entry");
        }
      }
      add(f);
    }
  }
}
#endif

/// Calls f(std::string_view) for each value of a BytesList.
template <class F>
void for_each_bytes(std::string_view list, F&& f) {
  detail::pb_reader r(list);
  while (!r.done()) {
    const auto [field, wt] = r.tag("BytesList");
    if (field == 1 && wt == 2)
      f(r.bytes("a BytesList value"));
    else
      r.skip(wt, "BytesList");
  }
}

/// Appends the values of a FloatList (`T` float) or Int64List (`T` std::int64_t), packed or not.
template <class T>
void append_values(std::string_view list, std::vector<T>& out) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::int64_t>);
  constexpr bool is_float = std::is_same_v<T, float>;
  constexpr const char* what = is_float ? "FloatList" : "Int64List";
  detail::pb_reader r(list);
  while (!r.done()) {
    const auto [field, wt] = r.tag(what);
    if (field != 1) {
      r.skip(wt, what);
    } else if (wt == 2) { // packed
      const std::string_view packed = r.bytes(what);
      if constexpr (is_float) {
        if (packed.size() % 4 != 0)
          throw error("example: a packed FloatList of " + std::to_string(packed.size()) +
                      " bytes (not a multiple of 4)");
        const std::size_t at = out.size();
        out.resize(at + packed.size() / 4);
        std::memcpy(out.data() + at, packed.data(), packed.size());
      } else {
        detail::pb_reader v(packed);
        while (!v.done())
          out.push_back(static_cast<std::int64_t>(v.varint(what)));
      }
    } else if (is_float && wt == 5) {
      out.push_back(static_cast<T>(r.fixed<float>(what)));
    } else if (!is_float && wt == 0) {
      out.push_back(static_cast<T>(static_cast<std::int64_t>(r.varint(what))));
    } else {
      throw error(std::string("example: wire type ") + std::to_string(wt) + " for a " + what +
                  " value");
    }
  }
}

/// Builds a serialized tf.train.Example (features in the order added; lists packed, as
/// TensorFlow writes them).
class example_builder {
public:
  example_builder& add_bytes(std::string_view name, std::span<const std::string_view> values) {
    std::string list;
    for (auto v : values)
      detail::put_bytes(list, 1, v);
    return add(name, 1, list);
  }
  example_builder& add_bytes(std::string_view name, std::string_view value) {
    return add_bytes(name, std::span<const std::string_view>(&value, 1));
  }
  example_builder& add_floats(std::string_view name, std::span<const float> values) {
    std::string list;
    if (!values.empty())
      detail::put_bytes(list, 1,
                        std::string_view(reinterpret_cast<const char*>(values.data()),
                                         values.size() * sizeof(float)));
    return add(name, 2, list);
  }
  example_builder& add_int64s(std::string_view name, std::span<const std::int64_t> values) {
    std::string packed, list;
    for (auto v : values)
      detail::put_varint(packed, static_cast<std::uint64_t>(v));
    if (!values.empty())
      detail::put_bytes(list, 1, packed);
    return add(name, 3, list);
  }
  example_builder& add_int64(std::string_view name, std::int64_t v) {
    return add_int64s(name, std::span<const std::int64_t>(&v, 1));
  }
  /// The serialized Example.
  std::string str() const {
    std::string ex;
    detail::put_bytes(ex, 1, features_); // features set, even when empty (as TensorFlow does)
    return ex;
  }

private:
  example_builder& add(std::string_view name, std::uint64_t kind, const std::string& list) {
    std::string feature, entry;
    detail::put_bytes(feature, kind, list);
    detail::put_bytes(entry, 1, name);
    detail::put_bytes(entry, 2, feature);
    detail::put_bytes(features_, 1, entry);
    return *this;
  }
  std::string features_;
};

// ---- typed feature specs ------------------------------------------------------------------

/// The dtype of a bytes feature in a spec (values are std::string).
struct bytes {};

namespace detail {
template <class T>
inline constexpr feature_kind kind_of = std::is_same_v<T, bytes>          ? feature_kind::bytes
                                        : std::is_same_v<T, float>        ? feature_kind::floats
                                        : std::is_same_v<T, std::int64_t> ? feature_kind::int64s
                                                                          : feature_kind::none;
template <class T>
using element_of = std::conditional_t<std::is_same_v<T, bytes>, std::string, T>;
/// What a fixed_len feature of dtype T and rank R decodes to.
template <class T, std::size_t R>
struct fixed_value {
  using type = tensor<T>;
};
template <std::size_t R>
struct fixed_value<bytes, R> {
  using type = std::vector<std::string>;
};
template <>
struct fixed_value<bytes, 0> {
  using type = std::string;
};
} // namespace detail

/// tf.io.FixedLenFeature(shape, dtype, default_value): exactly numel(Shape) values. Without a
/// Default the feature is required; with one (numeric dtypes only) a missing feature takes it in
/// every element. Its value: tensor<T> of Shape for float and int64, std::string for a bytes
/// feature of shape<>, else std::vector<std::string>.
template <fixed_string Name, class T, class Shape, auto... Default>
struct fixed_len {
  static_assert(detail::kind_of<T> != feature_kind::none,
                "fixed_len: the dtype is float, std::int64_t or io::bytes");
  static_assert(sizeof...(Default) <= 1, "fixed_len: at most one default value");
  static_assert(sizeof...(Default) == 0 || !std::is_same_v<T, bytes>,
                "fixed_len: defaults are for float and int64 features");
  static constexpr std::string_view name = Name.view();
  using value_type = typename detail::fixed_value<T, Shape::rank>::type;
  using dtype = T;
  using shape_type = Shape;
  static constexpr bool fixed = true;
  static constexpr bool has_default = sizeof...(Default) == 1;
  static constexpr auto default_value() {
    detail::element_of<T> v{};
    ((v = static_cast<detail::element_of<T>>(Default)), ...);
    return v;
  }
  static constexpr std::int64_t count = numel(Shape::dims);
};

/// tf.io.VarLenFeature(dtype): any number of values (none when missing); std::vector of them.
template <fixed_string Name, class T>
struct var_len {
  static_assert(detail::kind_of<T> != feature_kind::none,
                "var_len: the dtype is float, std::int64_t or io::bytes");
  static constexpr std::string_view name = Name.view();
  using value_type = std::vector<detail::element_of<T>>;
  using dtype = T;
  static constexpr bool fixed = false;
};

namespace detail {

[[noreturn]] inline void feature_fail(std::string_view where, std::string_view name,
                                      const std::string& why) {
  throw error("example: " + std::string(where) + ": feature \"" + std::string(name) + "\" " + why);
}

/// what() of a typeflow::error without its "typeflow: example: " prefix.
TYPEFLOW_DECL_DEFERRED std::string bare(const error& e)
#if TYPEFLOW_BODIES
{
  std::string w = e.what();
  for (std::string_view p :
       {std::string_view("typeflow: example: "), std::string_view("typeflow: ")})
    if (w.rfind(p, 0) == 0)
      return w.erase(0, p.size());
  return w;
}
#else
    ;
#endif

/// Runs f, which decodes feature `name`'s list, naming the record and the feature on failure.
template <class F>
void decode_list(std::string_view where, std::string_view name, F&& f) {
  try {
    f();
  } catch (const error& e) {
    feature_fail(where, name, "is malformed: " + bare(e));
  }
}

template <class T>
void check_kind(const feature_view& f, std::string_view where) {
  if (f.kind != kind_of<T>)
    feature_fail(where, f.name,
                 std::string("is a ") + kind_name(f.kind) + ", the spec expects a " +
                     kind_name(kind_of<T>));
}

/// Decodes feature Spec (a fixed_len or var_len; dispatched on its members, not its template
/// arguments: nvcc cannot match a partial specialization on a string template argument).
template <class S>
struct spec_parser {
  using T = typename S::dtype;
  static typename S::value_type get(const example_view& ex, std::string_view where) {
    const feature_view* f = ex.find(S::name);
    if constexpr (!S::fixed) {
      typename S::value_type v;
      if (!f)
        return v;
      check_kind<T>(*f, where);
      decode_list(where, S::name, [&] {
        if constexpr (std::is_same_v<T, bytes>)
          for_each_bytes(f->list, [&](std::string_view s) { v.emplace_back(s); });
        else
          append_values<T>(f->list, v);
      });
      return v;
    } else if constexpr (std::is_same_v<T, bytes>) {
      if (!f)
        feature_fail(where, S::name, "is missing (required: it has no default)");
      check_kind<T>(*f, where);
      std::vector<std::string> v;
      decode_list(where, S::name,
                  [&] { for_each_bytes(f->list, [&](std::string_view s) { v.emplace_back(s); }); });
      check_count(where, v.size());
      if constexpr (S::shape_type::rank == 0)
        return std::move(v[0]);
      else
        return v;
    } else {
      tensor<T> t(tensor<T>::uninitialized, std::vector<std::int64_t>(S::shape_type::dims.begin(),
                                                                      S::shape_type::dims.end()));
      if (!f) {
        if constexpr (S::has_default) {
          std::fill_n(t.data(), t.size(), S::default_value());
          return t;
        } else {
          feature_fail(where, S::name, "is missing (required: it has no default)");
        }
      }
      check_kind<T>(*f, where);
      thread_local std::vector<T> values;
      values.clear();
      decode_list(where, S::name, [&] { append_values<T>(f->list, values); });
      check_count(where, values.size());
      std::copy(values.begin(), values.end(), t.data());
      return t;
    }
  }
  static void check_count(std::string_view where, std::size_t n) {
    if (static_cast<std::int64_t>(n) != S::count)
      feature_fail(where, S::name,
                   "has " + std::to_string(n) + " values, its shape " +
                       dims_string(S::shape_type::dims) + " needs " + std::to_string(S::count));
  }
};

} // namespace detail

/// Decodes the features Spec... of one serialized Example; `where` names the record in errors
/// (e.g. "record 7 of train.tfrecord"). A missing required feature, a feature of another kind,
/// a wrong number of values or a malformed record throws typeflow::error naming both.
template <class... Spec>
std::tuple<typename Spec::value_type...> parse_example(std::string_view record,
                                                       std::string_view where = "a record") {
  thread_local example_view ex;
  try {
    ex.parse(record);
  } catch (const error& e) {
    throw error("example: " + std::string(where) + ": malformed: " + detail::bare(e));
  }
  return std::tuple<typename Spec::value_type...>{detail::spec_parser<Spec>::get(ex, where)...};
}

/// tf.io.decode_raw: the bytes as little-endian values of U (the length a multiple of U's size).
template <class U>
std::vector<U> decode_raw(std::string_view bytes) {
  if (bytes.size() % sizeof(U) != 0)
    throw error("decode_raw: " + std::to_string(bytes.size()) +
                " bytes are not a whole number of " + std::to_string(sizeof(U)) + "-byte values");
  std::vector<U> v(bytes.size() / sizeof(U));
  if (!v.empty())
    std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

} // namespace typeflow::io
