#include <stdexcept>
#include <string>
#include <utility>

#include "bench/ceilings/ceilings.hpp"
#include "bench/common/buffers.hpp"
#include "bench/common/cuda_check.hpp"
#include "bench/common/data.hpp"

namespace mok::bench::ceilings {
namespace {

constexpr uint64_t kSeedSource = 0xa54ff53a5f1d36f1ull;
constexpr uint64_t kSeedOtherSource = 0x510e527fade682d1ull;
// Any nonzero range will do: copies move bits, they only must not be zeros.
constexpr float kValueLo = -1.0f;
constexpr float kValueHi = 1.0f;
constexpr double kBytesPerGigabyte = 1e9;
// A device copy reads every byte once and writes it once.
constexpr double kDeviceCopyTrafficFactor = 2.0;

double gigabytes(size_t bytes) {
    return static_cast<double>(bytes) / kBytesPerGigabyte;
}

// Fills `buffer` with random fp32 words on its device, waiting for the fill.
void fill_random(const DeviceBuffer<float>& buffer, uint64_t seed) {
    const Stream stream(buffer.device());
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(buffer.device()));
    fill_uniform(buffer.get(), buffer.count(), kValueLo, kValueHi, seed, stream.get());
    stream.synchronize();
}

// Checks that `dst` holds `src` byte for byte, comparing on dst's device (src may be a peer's memory).
void expect_equal(const DeviceBuffer<float>& dst, const DeviceBuffer<float>& src, const std::string& what) {
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(dst.device()));
    const Stream stream(dst.device());
    const uint64_t differing = count_differences(dst.get(), src.get(), dst.bytes(), stream.get());
    if (differing != 0) {
        throw std::runtime_error(what + ": " + std::to_string(differing) + " bytes differ after the copy");
    }
}

size_t float_count(size_t bytes) {
    return bytes / sizeof(float);
}

}  // namespace

bool enable_peer_access(int a, int b) {
    int a_to_b = 0;
    int b_to_a = 0;
    MOK_BENCH_CHECK_CUDA(cudaDeviceCanAccessPeer(&a_to_b, a, b));
    MOK_BENCH_CHECK_CUDA(cudaDeviceCanAccessPeer(&b_to_a, b, a));
    if (a_to_b == 0 || b_to_a == 0) {
        return false;
    }
    for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(from));
        const cudaError_t error = cudaDeviceEnablePeerAccess(to, 0);
        if (error == cudaErrorPeerAccessAlreadyEnabled) {
            cudaGetLastError();  // not an error for us: clear it so later checks do not see it
        } else {
            MOK_BENCH_CHECK_CUDA(error);
        }
    }
    return true;
}

Case device_copy_case(size_t bytes, const TimingOptions& timing) {
    Case result;
    result.name = "device_copy/" + std::to_string(bytes >> 20) + "MiB";
    result.params.set("bytes", bytes).set("method", "cudaMemcpyAsync device to device").set("counts", "read + write");
    const DeviceBuffer<float> src(0, float_count(bytes));
    const DeviceBuffer<float> dst(0, float_count(bytes));
    fill_random(src, kSeedSource);
    const Stream stream(0);
    const auto copy = [&](int) {
        MOK_BENCH_CHECK_CUDA(
            cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice, stream.get()));
    };
    MOK_BENCH_CHECK_CUDA(cudaSetDevice(0));
    copy(0);
    stream.synchronize();
    expect_equal(dst, src, result.name);

    Timer timer({StreamOnDevice{0, stream.get()}});
    const TimingStats stats = timer.time(copy, timing);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(
        rate_figure("bandwidth", "GB/s", kDeviceCopyTrafficFactor * gigabytes(src.bytes()), stats));
    return result;
}

Case peer_copy_case(int src_device, int dst_device, size_t bytes, const TimingOptions& timing) {
    Case result;
    result.name = "peer_copy/" + std::to_string(src_device) + "to" + std::to_string(dst_device);
    result.params.set("bytes", bytes).set("method", "cudaMemcpyPeerAsync on the source device's stream");
    const bool peer_access = enable_peer_access(src_device, dst_device);
    result.params.set("peer_access", peer_access);
    if (!peer_access) {
        result.note = "no peer access between the devices: the copy is staged through the host";
    }
    const DeviceBuffer<float> src(src_device, float_count(bytes));
    const DeviceBuffer<float> dst(dst_device, float_count(bytes));
    fill_random(src, kSeedSource);
    const Stream stream(src_device);
    const auto copy = [&](int) {
        MOK_BENCH_CHECK_CUDA(
            cudaMemcpyPeerAsync(dst.get(), dst_device, src.get(), src_device, src.bytes(), stream.get()));
    };
    copy(0);
    stream.synchronize();
    if (peer_access) {
        expect_equal(dst, src, result.name);
    }

    Timer timer({StreamOnDevice{src_device, stream.get()}});
    const TimingStats stats = timer.time(copy, timing);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(rate_figure("bandwidth", "GB/s", gigabytes(src.bytes()), stats));
    return result;
}

Case peer_copy_both_case(size_t bytes, const TimingOptions& timing) {
    constexpr int kFirst = 0;
    constexpr int kSecond = 1;
    constexpr double kDirections = 2.0;
    Case result;
    result.name = "peer_copy/both";
    result.params.set("bytes", bytes).set("method", "cudaMemcpyPeerAsync 0->1 and 1->0 at once, one stream each");
    const bool peer_access = enable_peer_access(kFirst, kSecond);
    result.params.set("peer_access", peer_access);
    if (!peer_access) {
        result.note = "no peer access between the devices: the copies are staged through the host";
    }
    const DeviceBuffer<float> src0(kFirst, float_count(bytes));
    const DeviceBuffer<float> dst0(kFirst, float_count(bytes));
    const DeviceBuffer<float> src1(kSecond, float_count(bytes));
    const DeviceBuffer<float> dst1(kSecond, float_count(bytes));
    fill_random(src0, kSeedSource);
    fill_random(src1, kSeedOtherSource);
    const Stream stream0(kFirst);
    const Stream stream1(kSecond);
    const auto copy_both = [&](int) {
        MOK_BENCH_CHECK_CUDA(cudaMemcpyPeerAsync(dst1.get(), kSecond, src0.get(), kFirst, src0.bytes(), stream0.get()));
        MOK_BENCH_CHECK_CUDA(cudaMemcpyPeerAsync(dst0.get(), kFirst, src1.get(), kSecond, src1.bytes(), stream1.get()));
    };
    copy_both(0);
    stream0.synchronize();
    stream1.synchronize();
    if (peer_access) {
        expect_equal(dst1, src0, result.name + " 0->1");
        expect_equal(dst0, src1, result.name + " 1->0");
    }

    Timer timer({StreamOnDevice{kFirst, stream0.get()}, StreamOnDevice{kSecond, stream1.get()}});
    const TimingStats stats = timer.time(copy_both, timing);
    result.figures.push_back(time_figure("time", stats));
    result.figures.push_back(rate_figure("bandwidth_each_way", "GB/s", gigabytes(src0.bytes()), stats));
    result.figures.push_back(rate_figure("bandwidth_total", "GB/s", kDirections * gigabytes(src0.bytes()), stats));
    return result;
}

}  // namespace mok::bench::ceilings
