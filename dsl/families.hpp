// The table of mask families: one row per family says everything the rest of attnjit needs
// (its name, FlashMask layout, parameters, host builder, device builder's parameters and
// definition, and its definition as a predicate). The rows live next to the host builders in
// dsl/builders.cpp; the mask language (dsl/mask_families.hpp), the C ABI and Python
// (attnjit_mask_families, attnjit_intervals_family), the device builders
// (include/attnjit/mask_builder.hpp) and attnc read them from here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsl/intervals.hpp"

namespace attnjit::dsl {

/// One sample's parameter values in the order of its family's parameters: an integer parameter
/// holds one value, a list parameter its values.
struct SampleArgs {
  std::vector<std::vector<int>> values;

  int integer(int i) const { return values[static_cast<std::size_t>(i)].front(); }
  std::span<const int> list(int i) const { return values[static_cast<std::size_t>(i)]; }
};

/// How a parameter relates to the sample length N; checked before the builder runs, in the
/// language's words or flashmask()'s.
enum class ParamRole : std::uint8_t {
  plain,
  tokens,     ///< counts tokens: the values of all `tokens` parameters sum to N
  per_token,  ///< one value per token: N values
  per_item,   ///< one value per element of the family's `tokens` list
};

/// A parameter of a family.
struct FamilyParam {
  std::string_view name;  ///< in mask-language calls and in the builders' messages
  bool list = false;  ///< a list of ints (in the language: a list or a tensor name), else an int
  ParamRole role = ParamRole::plain;
  std::string_view keyword = {};  ///< flashmask()'s keyword where it differs from `name`
  std::string_view item = {};     ///< per_item: what each value stands for, e.g. "document"
};

/// A keyword parameter of flashmask() (and of attnjit_intervals_family) for one sample.
struct KeywordParam {
  std::string_view name;
  int depth = 0;  ///< 0: an int, 1: a list of ints, 2: a list of lists of ints
};

/// A keyword's value: depth 0 holds {{v}}, depth 1 {values}, depth 2 the lists.
struct KeywordValue {
  int depth = 0;
  std::vector<std::vector<int>> rows;
};
using KeywordArgs = std::vector<std::pair<std::string, KeywordValue>>;

/// The fields of attnjit::MaskBuildArgs a device builder reads (bits, in the order of messages).
enum DeviceParam : unsigned {
  kOffsets = 1u << 0,
  kPrefix = 1u << 1,
  kPrefixes = 1u << 2,
  kTest = 1u << 3,
  kDroppedStart = 1u << 4,
  kDroppedLength = 1u << 5,
  kWindow = 1u << 6,
  kGlobalTokens = 1u << 7,
  kWindowLeft = 1u << 8,
  kWindowRight = 1u << 9,
  kSeed = 1u << 10,
};

/// "offsets, prefix, ...": the names of the fields in `params`, in DeviceParam order.
std::string device_param_names(unsigned params);

/// One batch row (and mask head) of a device builder's parameters, as the host sees them.
struct DeviceSample {
  int n = 0;                  ///< N, the sample length
  std::vector<int> offsets;   ///< offsets: this row, S + 1 entries
  std::vector<int> prefixes;  ///< prefixes: this row, S entries
  int prefix = 0, test = 0, dropped_start = 0, dropped_length = 0;
  int window = -1, global_tokens = -1, window_left = -1, window_right = -1;
  std::uint64_t seed = 0;
  int batch_row = 0, mask_head = 0, mask_heads = 1;
};

/// A generated tensor of the language's predicate definition, one sample's row: named
/// `_<stem><instance>` in the predicate.
struct SampleTensor {
  std::string_view stem;
  std::vector<std::int32_t> values;
};

/// One mask family. Adding one: its host builder (declared in dsl/builders.hpp, defined in
/// dsl/builders.cpp) and its row appended to family_table() there (messages list the families in
/// table order), its device builder `build_<name>` (templates/attnjit/masks/mask_builders.cuh)
/// and its tests (tests/unit/test_builders.cpp); everything else reads this row.
struct FamilyRow {
  std::string_view name;
  bool causal = false;  ///< FlashMask layout (full: false, causal: true, with no vectors)
  int columns = 0;      ///< 1, 2 or 4 interval vectors per key column; 0 for full and causal
  std::vector<FamilyParam> params;
  /// One sample of n tokens (N = seqlen_q = seqlen_k) from its parameters, after the checks of
  /// their roles. Null for full and causal.
  IntervalVectors (*build)(int n, const SampleArgs& args) = nullptr;

  /// The device builder: the MaskBuildArgs fields it reads (DeviceParam bits), whether its
  /// vectors differ between mask heads, and its definition on the host (the vectors of one
  /// batch row and mask head, equal to what the device writes).
  unsigned device_params = 0;
  bool per_head = false;
  IntervalVectors (*device_reference)(const DeviceSample& sample) = nullptr;

  /// The language's definition as a predicate over q, k (integer parameters as literals,
  /// generated tensors `_<stem><instance>`) and one sample's rows of those tensors. Optional:
  /// without them a family is defined over its own vectors (`_lts<instance>`, ...).
  std::string (*predicate)(const SampleArgs& integers, int instance) = nullptr;
  std::vector<SampleTensor> (*tensors)(const SampleArgs& sample) = nullptr;

  /// flashmask()'s parameters where they are not `params` (by keyword), and the builder of one
  /// sample from them (`where` follows the value in the messages of its checks).
  std::vector<KeywordParam> keywords = {};
  IntervalVectors (*build_keywords)(int n, const KeywordArgs& args,
                                    std::string_view where) = nullptr;

  bool has_vectors() const { return columns > 0; }
};

/// Every family, in table order: full, causal, then the families with vectors.
std::span<const FamilyRow> family_table();

/// The row named `name`, or null.
const FamilyRow* find_family(std::string_view name);

/// The row of a family with vectors named `text`; throws Error naming `field`, the value and
/// the families with vectors otherwise.
const FamilyRow& vector_family(std::string_view text, std::string_view field = "family");

/// flashmask()'s keyword parameters of `row`: its `keywords`, else its params by keyword.
std::vector<KeywordParam> keyword_params(const FamilyRow& row);

/// One sample of `row` (with vectors) of n tokens from flashmask()'s keyword parameters: checks
/// the keywords (exactly the family's, of their depths), the parameters' roles against n
/// (`where`, e.g. " (sample 1)", follows the value in those messages), then builds.
IntervalVectors build_from_keywords(const FamilyRow& row, int n, const KeywordArgs& args,
                                    std::string_view where = {});

}  // namespace attnjit::dsl
