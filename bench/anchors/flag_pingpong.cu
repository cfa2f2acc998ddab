// Flag ping-pong through GPU memory: the floor a GPU-initiated signal can reach, written in plain CUDA C++
// so that ferrocomm's ping-pong has a figure from other code beside it.
//
// Two sides pass a counter back and forth. Side A writes i+1 into B's flag and waits until its own flag
// reads i+1; side B waits for i+1 in its flag and writes i+1 back into A's. Each side polls memory that
// is local to it and writes into the other's (the cheap direction on NVLink: a posted remote store, a
// local poll). One thread per side; the round trip is timed on side A with %globaltimer over `iters`
// round trips after `warmup` untimed ones, so kernel launch is not in the figure.
//
// Placements:
//   intra-GPU  both sides are blocks of one kernel on one GPU, both flags in that GPU's memory
//              (the ordering cost of the .sys scope without any link in the way);
//   GPU pair   side A is a kernel on GPU a, side B a kernel on GPU b (own stream each), each flag in its
//              poller's memory, the other side writing it through peer access (NVLink or PCIe).
//
// Variants (the flag protocol is the same, the instructions differ):
//   st.release.sys/ld.acquire.sys   PTX release store, acquire load (what a correct signal needs)
//   threadfence_system+volatile     __threadfence_system() then a volatile store; volatile poll then fence
//   relaxed.sys (no ordering)       PTX relaxed .sys store and load: orders nothing, a floor only
//
// Output, one line per variant and repeat (bench/anchors.rs reads it):
//   ref pingpong <variant>  [intra-gpu 0]  rtt X us one-way Y us
//   ref pingpong <variant>  [gpus 0<->1]  rtt X us one-way Y us
//
// Build: nvcc -O3 -arch=sm_90 -o flag_pingpong flag_pingpong.cu
// Run:   ./flag_pingpong [--iters N] [--warmup N] [--repeats N]
// No multicast objects, no NVLS: plain device memory and peer access only.

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t err_ = (call);                                                                  \
        if (err_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "flag_pingpong: %s failed: %s (%s:%d)\n", #call,                   \
                         cudaGetErrorString(err_), __FILE__, __LINE__);                             \
            std::exit(1);                                                                           \
        }                                                                                           \
    } while (0)

enum Variant { RELEASE_ACQUIRE = 0, FENCE_VOLATILE = 1, RELAXED = 2 };

static const char *variant_name(int v) {
    switch (v) {
        case RELEASE_ACQUIRE: return "st.release.sys/ld.acquire.sys";
        case FENCE_VOLATILE: return "threadfence_system+volatile";
        default: return "relaxed.sys (no ordering)";
    }
}

// A side gives up after this long without seeing the value it waits for (a broken pairing, a peer
// kernel that never started), so a failure ends the run instead of hanging the GPU.
#define SPIN_LIMIT_NS 2000000000ull

__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int V>
__device__ __forceinline__ void signal(unsigned int *flag, unsigned int value) {
    if (V == RELEASE_ACQUIRE) {
        asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
    } else if (V == FENCE_VOLATILE) {
        __threadfence_system();
        *reinterpret_cast<volatile unsigned int *>(flag) = value;
    } else {
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
    }
}

template <int V>
__device__ __forceinline__ unsigned int load_flag(const unsigned int *flag) {
    unsigned int v;
    if (V == RELEASE_ACQUIRE) {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    } else if (V == FENCE_VOLATILE) {
        v = *reinterpret_cast<const volatile unsigned int *>(flag);
    } else {
        asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    }
    return v;
}

// Waits until *flag >= value; false when SPIN_LIMIT_NS passes first.
template <int V>
__device__ __forceinline__ bool wait_for(const unsigned int *flag, unsigned int value) {
    unsigned long long start = 0;
    unsigned int spins = 0;
    while (load_flag<V>(flag) < value) {
        if ((++spins & 1023u) == 0) {
            unsigned long long now = globaltimer();
            if (start == 0) {
                start = now;
            } else if (now - start > SPIN_LIMIT_NS) {
                return false;
            }
        }
    }
    if (V == FENCE_VOLATILE) __threadfence_system();
    return true;
}

// Side A: my_flag is A's (polled here), peer_flag is B's. result[0] = ns over the timed round trips,
// result[1] = 1 when a wait timed out.
template <int V>
__device__ void side_a(unsigned int *my_flag, unsigned int *peer_flag, int warmup, int iters,
                       unsigned long long *result) {
    unsigned long long t0 = 0;
    for (int i = 0; i < warmup + iters; ++i) {
        if (i == warmup) t0 = globaltimer();
        signal<V>(peer_flag, static_cast<unsigned int>(i + 1));
        if (!wait_for<V>(my_flag, static_cast<unsigned int>(i + 1))) {
            result[1] = 1;
            return;
        }
    }
    result[0] = globaltimer() - t0;
}

template <int V>
__device__ void side_b(unsigned int *my_flag, unsigned int *peer_flag, int warmup, int iters,
                       unsigned long long *result) {
    for (int i = 0; i < warmup + iters; ++i) {
        if (!wait_for<V>(my_flag, static_cast<unsigned int>(i + 1))) {
            result[1] = 1;
            return;
        }
        signal<V>(peer_flag, static_cast<unsigned int>(i + 1));
    }
}

// One GPU: block 0 is side A, block 1 side B (both resident at once: two blocks on a GPU with many SMs).
template <int V>
__global__ void intra_gpu(unsigned int *flags, int warmup, int iters, unsigned long long *result) {
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) {
        side_a<V>(&flags[0], &flags[32], warmup, iters, result);
    } else {
        side_b<V>(&flags[32], &flags[0], warmup, iters, result + 2);
    }
}

template <int V>
__global__ void pair_a(unsigned int *my_flag, unsigned int *peer_flag, int warmup, int iters,
                       unsigned long long *result) {
    if (threadIdx.x == 0) side_a<V>(my_flag, peer_flag, warmup, iters, result);
}

template <int V>
__global__ void pair_b(unsigned int *my_flag, unsigned int *peer_flag, int warmup, int iters,
                       unsigned long long *result) {
    if (threadIdx.x == 0) side_b<V>(my_flag, peer_flag, warmup, iters, result);
}

template <int V>
static void launch_intra(unsigned int *flags, int warmup, int iters, unsigned long long *result) {
    intra_gpu<V><<<2, 32>>>(flags, warmup, iters, result);
}

static void print_line(int v, const std::string &where, unsigned long long ns, int iters) {
    double rtt_us = static_cast<double>(ns) / 1000.0 / iters;
    std::printf("ref pingpong %-31s [%s]  rtt %.3f us one-way %.3f us\n", variant_name(v), where.c_str(),
                rtt_us, rtt_us / 2.0);
    std::fflush(stdout);
}

static int run_intra(int dev, int warmup, int iters, int repeats) {
    CHECK(cudaSetDevice(dev));
    unsigned int *flags = nullptr;
    unsigned long long *result = nullptr;
    // A and B's flags 128 bytes apart: separate cache lines, so neither poll is disturbed by the other.
    CHECK(cudaMalloc(&flags, 64 * sizeof(unsigned int)));
    CHECK(cudaMallocHost(&result, 4 * sizeof(unsigned long long)));
    std::string where = "intra-gpu " + std::to_string(dev);
    int failures = 0;
    for (int v = 0; v < 3; ++v) {
        for (int r = 0; r < repeats; ++r) {
            CHECK(cudaMemset(flags, 0, 64 * sizeof(unsigned int)));
            std::memset(result, 0, 4 * sizeof(unsigned long long));
            if (v == RELEASE_ACQUIRE) launch_intra<RELEASE_ACQUIRE>(flags, warmup, iters, result);
            if (v == FENCE_VOLATILE) launch_intra<FENCE_VOLATILE>(flags, warmup, iters, result);
            if (v == RELAXED) launch_intra<RELAXED>(flags, warmup, iters, result);
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            if (result[1] || result[3]) {
                std::printf("ref pingpong %-31s [%s]  failed: a side timed out waiting for its flag\n",
                            variant_name(v), where.c_str());
                ++failures;
                continue;
            }
            print_line(v, where, result[0], iters);
        }
    }
    CHECK(cudaFree(flags));
    CHECK(cudaFreeHost(result));
    return failures;
}

static int run_pair(int a, int b, int warmup, int iters, int repeats) {
    int a_to_b = 0, b_to_a = 0;
    CHECK(cudaDeviceCanAccessPeer(&a_to_b, a, b));
    CHECK(cudaDeviceCanAccessPeer(&b_to_a, b, a));
    std::string where = "gpus " + std::to_string(a) + "<->" + std::to_string(b);
    if (!a_to_b || !b_to_a) {
        std::printf("# flag_pingpong: skipped [%s]: no peer access between the two GPUs\n", where.c_str());
        return 0;
    }
    unsigned int *flag_a = nullptr, *flag_b = nullptr;
    unsigned long long *result = nullptr;
    cudaStream_t sa, sb;
    CHECK(cudaSetDevice(a));
    cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
    (void)cudaGetLastError();
    CHECK(cudaMalloc(&flag_a, 32 * sizeof(unsigned int)));
    CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CHECK(cudaSetDevice(b));
    e = cudaDeviceEnablePeerAccess(a, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
    (void)cudaGetLastError();
    CHECK(cudaMalloc(&flag_b, 32 * sizeof(unsigned int)));
    CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    // Both GPUs' kernels write their results here: portable pinned memory.
    CHECK(cudaHostAlloc(&result, 4 * sizeof(unsigned long long), cudaHostAllocPortable));
    int failures = 0;
    for (int v = 0; v < 3; ++v) {
        for (int r = 0; r < repeats; ++r) {
            CHECK(cudaSetDevice(a));
            CHECK(cudaMemset(flag_a, 0, 32 * sizeof(unsigned int)));
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaSetDevice(b));
            CHECK(cudaMemset(flag_b, 0, 32 * sizeof(unsigned int)));
            CHECK(cudaDeviceSynchronize());
            std::memset(result, 0, 4 * sizeof(unsigned long long));
            // Kernels are launched with each GPU current: pair_b on b, pair_a on a.
            CHECK(cudaSetDevice(b));
            if (v == RELEASE_ACQUIRE) pair_b<RELEASE_ACQUIRE><<<1, 32, 0, sb>>>(flag_b, flag_a, warmup, iters, result + 2);
            if (v == FENCE_VOLATILE) pair_b<FENCE_VOLATILE><<<1, 32, 0, sb>>>(flag_b, flag_a, warmup, iters, result + 2);
            if (v == RELAXED) pair_b<RELAXED><<<1, 32, 0, sb>>>(flag_b, flag_a, warmup, iters, result + 2);
            CHECK(cudaGetLastError());
            CHECK(cudaSetDevice(a));
            if (v == RELEASE_ACQUIRE) pair_a<RELEASE_ACQUIRE><<<1, 32, 0, sa>>>(flag_a, flag_b, warmup, iters, result);
            if (v == FENCE_VOLATILE) pair_a<FENCE_VOLATILE><<<1, 32, 0, sa>>>(flag_a, flag_b, warmup, iters, result);
            if (v == RELAXED) pair_a<RELAXED><<<1, 32, 0, sa>>>(flag_a, flag_b, warmup, iters, result);
            CHECK(cudaGetLastError());
            CHECK(cudaStreamSynchronize(sa));
            CHECK(cudaSetDevice(b));
            CHECK(cudaStreamSynchronize(sb));
            if (result[1] || result[3]) {
                std::printf("ref pingpong %-31s [%s]  failed: a side timed out waiting for its flag\n",
                            variant_name(v), where.c_str());
                ++failures;
                continue;
            }
            print_line(v, where, result[0], iters);
        }
    }
    CHECK(cudaSetDevice(a));
    CHECK(cudaFree(flag_a));
    CHECK(cudaStreamDestroy(sa));
    CHECK(cudaSetDevice(b));
    CHECK(cudaFree(flag_b));
    CHECK(cudaStreamDestroy(sb));
    CHECK(cudaFreeHost(result));
    return failures;
}

int main(int argc, char **argv) {
    int iters = 10000, warmup = 1000, repeats = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: %s [--iters N] [--warmup N] [--repeats N]\n", argv[0]);
            return 2;
        }
    }
    if (iters <= 0 || warmup < 0 || repeats <= 0) {
        std::fprintf(stderr, "flag_pingpong: iters and repeats must be positive\n");
        return 2;
    }
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# flag_pingpong: %d GPU(s), GPU 0 %s; %d round trips timed after %d, %d repeats; "
                "one-way = rtt / 2; 4-byte flag\n",
                count, prop.name, iters, warmup, repeats);
    int failures = run_intra(0, warmup, iters, repeats);
    if (count >= 2) {
        failures += run_pair(0, 1, warmup, iters, repeats);
    } else {
        std::printf("# flag_pingpong: skipped [gpus 0<->1]: only one GPU visible\n");
    }
    return failures ? 1 : 0;
}
