// The host's reading of a failed kernel's record: the right StatusCode, and a message naming the rank, the block
// and what was awaited.
#include <gtest/gtest.h>

#include <string>

#include "common/device_status.hpp"
#include "host/comm/device_status.hpp"

namespace mok::comm {
namespace {

DeviceStatus record(DeviceErrorCode code, int32_t rank, int32_t block, WaitSite site, int64_t observed,
                    int64_t expected) {
    DeviceStatus s{};
    s.code = static_cast<int32_t>(code);
    s.rank = rank + 1;  // stored plus one: zero means unclaimed
    s.block = block;
    s.site = static_cast<int32_t>(site);
    s.observed = observed;
    s.expected = expected;
    return s;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(TransportDeviceStatus, UnclaimedRecordIsOk) {
    EXPECT_TRUE(status_from_device(DeviceStatus{}).is_ok());
}

TEST(TransportDeviceStatus, TimeoutNamesRankBlockAndSite) {
    const Status s = status_from_device(record(DeviceErrorCode::kTimeout, 3, 17, WaitSite::kRoutingExchange, 4, 9));
    EXPECT_EQ(s.code(), StatusCode::kPeerTimeout);
    EXPECT_TRUE(contains(s.message(), "rank 3")) << s.message();
    EXPECT_TRUE(contains(s.message(), "block 17")) << s.message();
    EXPECT_TRUE(contains(s.message(), to_string(WaitSite::kRoutingExchange))) << s.message();
    EXPECT_TRUE(contains(s.message(), "observed 4")) << s.message();
    EXPECT_TRUE(contains(s.message(), "expected 9")) << s.message();
}

TEST(TransportDeviceStatus, OverflowNamesRankRowsAndCapacity) {
    const Status s =
        status_from_device(record(DeviceErrorCode::kScheduleOverflow, 1, 0, WaitSite::kNone, 40960, 32768));
    EXPECT_EQ(s.code(), StatusCode::kScheduleOverflow);
    EXPECT_TRUE(contains(s.message(), "rank 1")) << s.message();
    EXPECT_TRUE(contains(s.message(), "40960")) << s.message();
    EXPECT_TRUE(contains(s.message(), "32768")) << s.message();
}

TEST(TransportDeviceStatus, InvalidRoutingNamesRankTokenAndSlot) {
    const Status s = status_from_device(record(DeviceErrorCode::kInvalidRouting, 2, 5, WaitSite::kNone, 123, 6));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), "rank 2, token 123, slot 6")) << s.message();
}

}  // namespace
}  // namespace mok::comm
