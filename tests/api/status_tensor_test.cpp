// Status, tensor views and the wait-site names: the small vocabulary every error message is made of.
#include <cstdint>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/device_status.hpp"
#include "mok/status.hpp"
#include "mok/tensor.hpp"

namespace mok::testing {
namespace {

constexpr StatusCode kAllCodes[] = {
    StatusCode::kOk,           StatusCode::kInvalidArgument, StatusCode::kScheduleOverflow, StatusCode::kPeerTimeout,
    StatusCode::kNotSupported, StatusCode::kCudaError,       StatusCode::kNcclError,        StatusCode::kInternal};

TEST(Status, EveryCodeHasItsOwnName) {
    std::set<std::string> names;
    for (StatusCode code : kAllCodes) {
        const std::string name = to_string(code);
        EXPECT_FALSE(name.empty());
        EXPECT_TRUE(names.insert(name).second) << "two codes are called " << name;
    }
}

TEST(Status, InvalidArgumentNamesTheArgumentAndTheExpectation) {
    const Status s = Status::invalid_argument("args[0].inputs.x", "[4096, 7168] bf16, got [4096, 7169] bf16");
    EXPECT_FALSE(s.is_ok());
    EXPECT_FALSE(static_cast<bool>(s));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "argument 'args[0].inputs.x': expected [4096, 7168] bf16, got [4096, 7169] bf16");
    EXPECT_EQ(s.to_string(), std::string(to_string(StatusCode::kInvalidArgument)) + ": " + s.message());
}

TEST(Status, OkIsOk) {
    const Status s = Status::ok();
    EXPECT_TRUE(s.is_ok());
    EXPECT_TRUE(static_cast<bool>(s));
    EXPECT_EQ(s.code(), StatusCode::kOk);
    EXPECT_EQ(s.to_string(), to_string(StatusCode::kOk));
}

Status fails_then_counts(int* reached) {
    MOK_RETURN_IF_ERROR(Status(StatusCode::kPeerTimeout, "rank 3 waited"));
    ++*reached;
    return Status::ok();
}

Status passes_then_counts(int* reached) {
    MOK_RETURN_IF_ERROR(Status::ok());
    ++*reached;
    return Status::ok();
}

TEST(Status, ReturnIfErrorReturnsTheErrorAndOnlyThen) {
    int reached = 0;
    const Status failed = fails_then_counts(&reached);
    EXPECT_EQ(failed.code(), StatusCode::kPeerTimeout);
    EXPECT_EQ(failed.message(), "rank 3 waited");
    EXPECT_EQ(reached, 0);
    EXPECT_TRUE(passes_then_counts(&reached).is_ok());
    EXPECT_EQ(reached, 1);
}

TEST(WaitSite, EverySiteHasItsOwnName) {
    std::set<std::string> names;
    for (int32_t site = static_cast<int32_t>(WaitSite::kNone); site <= static_cast<int32_t>(WaitSite::kEpilogueHandoff);
         ++site) {
        const std::string name = to_string(static_cast<WaitSite>(site));
        EXPECT_FALSE(name.empty());
        EXPECT_TRUE(names.insert(name).second) << "two sites are called " << name;
    }
}

TEST(TensorView, DtypeSizesAndNames) {
    EXPECT_EQ(dtype_size(DType::kBF16), 2u);
    EXPECT_EQ(dtype_size(DType::kF32), 4u);
    EXPECT_EQ(dtype_size(DType::kI32), 4u);
    EXPECT_STREQ(to_string(DType::kBF16), "bf16");
    EXPECT_STREQ(to_string(DType::kF32), "fp32");
    EXPECT_STREQ(to_string(DType::kI32), "int32");
    EXPECT_EQ(to_string(Device::cpu()), "cpu");
    EXPECT_EQ(to_string(Device::cuda(3)), "cuda:3");
}

TEST(TensorView, ContiguousIsRowMajor) {
    alignas(16) static uint16_t storage[2 * 3 * 8];
    const TensorView v = TensorView::contiguous(storage, DType::kBF16, {2, 3, 8}, Device::cuda(1));
    EXPECT_TRUE(v.defined());
    EXPECT_EQ(v.rank, 3);
    EXPECT_EQ(v.shape[0], 2);
    EXPECT_EQ(v.shape[2], 8);
    EXPECT_EQ(v.stride[0], 24);
    EXPECT_EQ(v.stride[1], 8);
    EXPECT_EQ(v.stride[2], 1);
    EXPECT_EQ(v.numel(), 48);
    EXPECT_EQ(v.device, Device::cuda(1));
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.describe(), "[2, 3, 8] bf16 cuda:1");
}

TEST(TensorView, PaddedRowsAreNotContiguousAndSaySo) {
    alignas(16) static float storage[4 * 16];
    TensorView v = TensorView::contiguous(storage, DType::kF32, {4, 8});
    v.stride[0] = 16;
    EXPECT_FALSE(v.is_contiguous());
    EXPECT_EQ(v.describe(), "[4, 8] fp32 cpu strides [16, 1]");
}

TEST(TensorView, StridesOfExtentOneDimensionsDoNotMatter) {
    alignas(16) static int32_t storage[8];
    TensorView v = TensorView::contiguous(storage, DType::kI32, {1, 8});
    v.stride[0] = 12345;
    EXPECT_TRUE(v.is_contiguous());
}

TEST(TensorView, OverlapIsOfSpansFromFirstByteToLast) {
    alignas(16) static uint16_t storage[4 * 16];
    const TensorView all = TensorView::contiguous(storage, DType::kBF16, {4, 16});
    const TensorView first_rows = TensorView::contiguous(storage, DType::kBF16, {2, 16});
    const TensorView last_rows = TensorView::contiguous(storage + 2 * 16, DType::kBF16, {2, 16});
    EXPECT_TRUE(all.overlaps(first_rows));
    EXPECT_TRUE(last_rows.overlaps(all));
    EXPECT_FALSE(first_rows.overlaps(last_rows));  // they touch: the first ends where the second begins
    // A view one element into the next one's span overlaps it.
    const TensorView shifted = TensorView::contiguous(storage + 2 * 16 - 1, DType::kBF16, {1, 2});
    EXPECT_TRUE(shifted.overlaps(first_rows));
    EXPECT_TRUE(shifted.overlaps(last_rows));
    // Strided rows span up to their last element: columns 0-7 of rows 0-1 reach into row 1.
    TensorView strided = TensorView::contiguous(storage, DType::kBF16, {2, 8});
    strided.stride[0] = 16;
    EXPECT_TRUE(strided.overlaps(TensorView::contiguous(storage + 16, DType::kBF16, {1, 4})));
    EXPECT_FALSE(strided.overlaps(TensorView::contiguous(storage + 16 + 8, DType::kBF16, {1, 8})));
    // fp32 elements are 4 bytes: an fp32 view of storage's first 8 bytes reaches element 3 of the bf16 rows.
    const TensorView words = TensorView::contiguous(storage, DType::kF32, {1, 2});
    EXPECT_TRUE(words.overlaps(TensorView::contiguous(storage + 3, DType::kBF16, {1, 1})));
    EXPECT_FALSE(words.overlaps(TensorView::contiguous(storage + 4, DType::kBF16, {1, 1})));
    // Undefined and empty views overlap nothing.
    EXPECT_FALSE(all.overlaps(TensorView{}));
    EXPECT_FALSE(all.overlaps(TensorView::contiguous(storage, DType::kBF16, {0, 16})));
}

TEST(TensorView, TooManyDimensionsGiveAnUndefinedView) {
    alignas(16) static uint16_t storage[32];
    const TensorView v = TensorView::contiguous(storage, DType::kBF16, {1, 2, 2, 2, 4});
    EXPECT_FALSE(v.defined());
    EXPECT_EQ(v.describe(), "an undefined tensor (null data)");
}

}  // namespace
}  // namespace mok::testing
