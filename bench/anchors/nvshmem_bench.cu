// NVSHMEM anchors: put+signal ping-pong latency and put bandwidth, so that ferrocomm's GPU-initiated put
// and signal have NVIDIA's own one-sided library beside them, measured in the same session.
//
// Ping-pong (PE 0 and PE 1): PE 0 does nvshmem_putmem_signal_nbi(data, n bytes, signal := i+1) into
// PE 1, then nvshmem_signal_wait_until(own signal >= i+1); PE 1 waits, then puts back the same way. One
// thread per PE, a persistent kernel on each; the round trip is timed on PE 0 with %globaltimer over
// `iters` round trips after `warmup` untimed ones (no launch in the figure). one-way = rtt / 2.
//
// Put bandwidth (PE 0 into PE 1): one kernel whose blocks each own a slice of the message and repeat
// { nvshmemx_putmem_nbi_block(slice); nvshmem_quiet(); } `iters` times; the kernel is timed with CUDA
// events and the figure is kernel time / iters (one transfer, back to back, launch amortised). PE 1
// checks the first and last byte it received.
//
// With one PE (one GPU) both run as put-to-self: the same calls with pe = 0, labelled [self 1 PE];
// they measure the library's local path, not a link. A ping-pong iteration is then one put+signal
// seen arrive, so it is the one-way figure (the rtt printed is twice it). With two PEs on one GPU the placement says
// [shared-gpu N]: NVSHMEM allows it (multiple PEs per GPU); under MPS the two PEs' kernels run at once,
// without it they time-slice, so the ping-pong measures time-slicing, not signalling (the program says
// which, from the MPS control socket it finds).
//
// Output (bench/anchors.rs reads it):
//   nvshmem pingpong put_signal <n> B [<placement>]  rtt X us one-way Y us
//   nvshmem put putmem_nbi_block <n> B [<placement>, <b> blocks]  time X us  algbw Y GB/s
// placement: `gpus 0<->1` (ping-pong), `gpus 0->1` (put), `self 1 PE`, `shared-gpu 0`.
//
// Bootstrap: NVSHMEM's unique-ID bootstrap (NVSHMEMX_INIT_WITH_UNIQUEID). PE 0 writes the ID to the
// file named by NVSHMEM_BENCH_UID_FILE, the others read it; rank and size come from RANK / WORLD_SIZE
// (or OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE under mpirun), the GPU from NVSHMEM_BENCH_GPU, else
// LOCAL_RANK (or the rank) modulo the GPU count. run.sh starts the processes.
//
// Build (NVSHMEM_HOME = .../site-packages/nvidia/nvshmem):
//   nvcc -O3 -arch=sm_90 -rdc=true -I$NVSHMEM_HOME/include nvshmem_bench.cu -o nvshmem_bench \
//        -L$NVSHMEM_HOME/lib -Xlinker -rpath=$NVSHMEM_HOME/lib -l:libnvshmem_host.so.3 -lnvshmem_device
// Never creates multicast objects; run.sh sets NVSHMEM_DISABLE_NVLS=1 so the library does not either.

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>

// The MPS control daemon's socket this process would connect through ($CUDA_MPS_PIPE_DIRECTORY, or the
// driver's default /tmp/nvidia-mps), or "" when there is none: PEs sharing a GPU then time-slice.
static std::string mps_control_socket() {
    const char *dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    std::string path = std::string(dir && *dir ? dir : "/tmp/nvidia-mps") + "/control";
    struct stat st;
    return stat(path.c_str(), &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) ? path : std::string();
}

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t err_ = (call);                                                                  \
        if (err_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "nvshmem_bench: %s failed: %s (%s:%d)\n", #call,                   \
                         cudaGetErrorString(err_), __FILE__, __LINE__);                             \
            std::exit(1);                                                                           \
        }                                                                                           \
    } while (0)

__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// initiator: PE 0 (starts each round trip); peer: the PE it pings (itself with one PE).
__global__ void pingpong(char *data, uint64_t *signal, size_t bytes, int peer, bool initiator,
                         int warmup, int iters, unsigned long long *ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long t0 = 0;
    for (int i = 0; i < warmup + iters; ++i) {
        uint64_t v = static_cast<uint64_t>(i) + 1;
        if (i == warmup) t0 = globaltimer();
        if (initiator) {
            nvshmem_putmem_signal_nbi(data, data, bytes, signal, v, NVSHMEM_SIGNAL_SET, peer);
            nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, v);
        } else {
            nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, v);
            nvshmem_putmem_signal_nbi(data, data, bytes, signal, v, NVSHMEM_SIGNAL_SET, peer);
        }
    }
    if (initiator) *ns = globaltimer() - t0;
}

// The placement PE `pe` wrote into its `where` (read by PE 0 only).
__global__ void fetch_where(int *where, int *out, int pe) {
    out[0] = nvshmem_int_g(where, pe);
    out[1] = nvshmem_int_g(where + 1, pe);
}

// Each block puts its slice of [0, bytes), then waits for completion, `iters` times.
__global__ void put_bw(char *dst, const char *src, size_t bytes, int pe, int iters) {
    size_t slice = (bytes + gridDim.x - 1) / gridDim.x;
    slice = (slice + 15) & ~static_cast<size_t>(15);
    size_t off = slice * blockIdx.x;
    if (off >= bytes) return;
    size_t len = bytes - off < slice ? bytes - off : slice;
    for (int it = 0; it < iters; ++it) {
        nvshmemx_putmem_nbi_block(dst + off, src + off, len, pe);
        nvshmem_quiet();
        __syncthreads();
    }
}

static int env_int(const char *a, const char *b, int fallback) {
    const char *v = std::getenv(a);
    if (!v && b) v = std::getenv(b);
    return v ? std::atoi(v) : fallback;
}

// The unique ID travels through a file: written whole under a temporary name, then renamed, so a
// reader never sees half of it.
static bool exchange_uid(int rank, nvshmemx_uniqueid_t *uid) {
    const char *path = std::getenv("NVSHMEM_BENCH_UID_FILE");
    if (!path) {
        std::fprintf(stderr, "nvshmem_bench: NVSHMEM_BENCH_UID_FILE is not set (run.sh sets it)\n");
        return false;
    }
    if (rank == 0) {
        if (nvshmemx_get_uniqueid(uid) != 0) {
            std::fprintf(stderr, "nvshmem_bench: nvshmemx_get_uniqueid failed\n");
            return false;
        }
        std::string tmp = std::string(path) + ".tmp";
        FILE *f = std::fopen(tmp.c_str(), "wb");
        if (!f || std::fwrite(uid, sizeof(*uid), 1, f) != 1 || std::fclose(f) != 0 ||
            std::rename(tmp.c_str(), path) != 0) {
            std::fprintf(stderr, "nvshmem_bench: cannot write %s: %s\n", path, std::strerror(errno));
            return false;
        }
        return true;
    }
    for (int tries = 0; tries < 600; ++tries) {  // 60 s
        FILE *f = std::fopen(path, "rb");
        if (f) {
            bool ok = std::fread(uid, sizeof(*uid), 1, f) == 1;
            std::fclose(f);
            if (ok) return true;
        }
        usleep(100000);
    }
    std::fprintf(stderr, "nvshmem_bench: rank %d: no unique ID in %s after 60 s\n", rank, path);
    return false;
}

int main(int argc, char **argv) {
    int iters = 10000, warmup = 1000, repeats = 3;
    bool bandwidth_only = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--bandwidth-only")) bandwidth_only = true;
        else {
            std::fprintf(stderr, "usage: %s [--iters N] [--warmup N] [--repeats N] [--bandwidth-only]\n",
                         argv[0]);
            return 2;
        }
    }
    if (iters <= 0 || warmup < 0 || repeats <= 0) {
        std::fprintf(stderr, "nvshmem_bench: iters and repeats must be positive\n");
        return 2;
    }
    int rank = env_int("RANK", "OMPI_COMM_WORLD_RANK", 0);
    int world = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", 1);
    int local_rank = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", rank);
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    int gpu = env_int("NVSHMEM_BENCH_GPU", nullptr, local_rank % (count > 0 ? count : 1));
    CHECK(cudaSetDevice(gpu));

    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (!exchange_uid(rank, &uid)) return 1;
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(rank, world, &uid, &attr);
    nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    int me = nvshmem_my_pe();
    int npes = nvshmem_n_pes();

    // Which GPU PE 1 runs on (ordinal and PCI bus), for the placement field: PE 0 reads it with a get.
    int *where = static_cast<int *>(nvshmem_malloc(2 * sizeof(int)));
    int *peer_where = nullptr;
    CHECK(cudaMalloc(&peer_where, 2 * sizeof(int)));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, gpu));
    int mine[2] = {gpu, prop.pciDomainID * 65536 + prop.pciBusID * 256 + prop.pciDeviceID};
    CHECK(cudaMemcpy(where, mine, sizeof(mine), cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    int theirs[2] = {mine[0], mine[1]};
    if (me == 0 && npes >= 2) {
        fetch_where<<<1, 1>>>(where, peer_where, 1);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(theirs, peer_where, sizeof(theirs), cudaMemcpyDeviceToHost));
    }
    nvshmem_barrier_all();
    int gpus_host[2] = {mine[0], theirs[0]};
    bool solo = npes == 1;
    bool shared = npes >= 2 && mine[1] == theirs[1];
    int peer = solo ? 0 : 1;
    std::string pp_where, put_where;
    if (solo) {
        pp_where = put_where = "self 1 PE";
    } else if (shared) {
        pp_where = put_where = "shared-gpu " + std::to_string(gpus_host[0]);
    } else {
        pp_where = "gpus " + std::to_string(gpus_host[0]) + "<->" + std::to_string(gpus_host[1]);
        put_where = "gpus " + std::to_string(gpus_host[0]) + "->" + std::to_string(gpus_host[1]);
    }
    if (me == 0) {
        std::printf("# nvshmem_bench: NVSHMEM %d.%d.%d, %d PE(s), PE 0 on GPU %d (%s); ping-pong: %d round "
                    "trips after %d, one-way = rtt / 2; put: kernel time / iterations; %d repeats\n",
                    NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION, NVSHMEM_VENDOR_PATCH_VERSION,
                    npes, gpu, prop.name, iters, warmup, repeats);
        std::fflush(stdout);
    }
    // PEs past the second only take part in the collective calls.
    bool active = me < 2;

    const size_t max_pp = 8192;
    char *pp_data = static_cast<char *>(nvshmem_malloc(max_pp));
    uint64_t *signal = static_cast<uint64_t *>(nvshmem_malloc(sizeof(uint64_t)));
    unsigned long long *ns = nullptr;
    CHECK(cudaMallocHost(&ns, sizeof(unsigned long long)));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (!bandwidth_only) {
        if (shared && me == 0) {
            if (mps_control_socket().empty()) {
                std::printf("# nvshmem_bench: two PEs share GPU %d without MPS: their kernels time-slice, so "
                            "the ping-pong below measures that, not signalling\n",
                            gpus_host[0]);
            } else {
                std::printf("# nvshmem_bench: two PEs share GPU %d under MPS (%s): their kernels run at once\n",
                            gpus_host[0], mps_control_socket().c_str());
            }
        }
        const size_t pp_sizes[] = {8, 64, 1024, 8192};
        for (size_t bytes : pp_sizes) {
            for (int r = 0; r < repeats; ++r) {
                CHECK(cudaMemset(signal, 0, sizeof(uint64_t)));
                CHECK(cudaDeviceSynchronize());
                nvshmem_barrier_all();
                if (active) {
                    pingpong<<<1, 32, 0, stream>>>(pp_data, signal, bytes, me == 0 ? peer : 0, me == 0,
                                                   warmup, iters, ns);
                    CHECK(cudaGetLastError());
                    CHECK(cudaStreamSynchronize(stream));
                }
                if (me == 0) {
                    // Two PEs: an iteration is a round trip. One PE: an iteration is one put+signal to
                    // itself, seen arrive: one way; the rtt printed is then two of them.
                    double per_iter = static_cast<double>(*ns) / 1000.0 / iters;
                    double rtt = solo ? 2.0 * per_iter : per_iter;
                    std::printf("nvshmem pingpong put_signal %zu B [%s]  rtt %.3f us one-way %.3f us\n", bytes,
                                pp_where.c_str(), rtt, rtt / 2.0);
                    std::fflush(stdout);
                }
            }
        }
    }

    const size_t max_bw = size_t(1) << 30;
    char *dst = static_cast<char *>(nvshmem_malloc(max_bw));
    char *src = nullptr;
    CHECK(cudaMalloc(&src, max_bw));
    CHECK(cudaMemset(src, 0xab, max_bw));
    if (!dst) {
        if (me == 0) std::printf("# nvshmem_bench: nvshmem_malloc(1 GiB) failed: raise NVSHMEM_SYMMETRIC_SIZE\n");
        nvshmem_finalize();
        return 1;
    }
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    int bad = 0;
    for (size_t bytes = 8; bytes <= max_bw; bytes *= 8) {
        size_t b = bytes / 65536;
        int blocks = b < 1 ? 1 : (b > 64 ? 64 : static_cast<int>(b));
        double est_us = 5.0 + static_cast<double>(bytes) / 300e3;  // ~300 GB/s
        int n = static_cast<int>(20000.0 / est_us);
        n = n < 20 ? 20 : (n > 2000 ? 2000 : n);
        for (int r = 0; r < repeats; ++r) {
            if (me == peer) CHECK(cudaMemset(dst, 0, bytes));
            CHECK(cudaDeviceSynchronize());
            nvshmem_barrier_all();
            if (me == 0) {
                put_bw<<<blocks, 1024, 0, stream>>>(dst, src, bytes, peer, 2);  // warm-up
                CHECK(cudaEventRecord(start, stream));
                put_bw<<<blocks, 1024, 0, stream>>>(dst, src, bytes, peer, n);
                CHECK(cudaEventRecord(stop, stream));
                CHECK(cudaGetLastError());
                CHECK(cudaEventSynchronize(stop));
            }
            nvshmem_barrier_all();
            if (me == peer) {
                unsigned char first = 0, last = 0;
                CHECK(cudaMemcpy(&first, dst, 1, cudaMemcpyDeviceToHost));
                CHECK(cudaMemcpy(&last, dst + bytes - 1, 1, cudaMemcpyDeviceToHost));
                if (first != 0xab || last != 0xab) {
                    std::printf("# nvshmem_bench: put of %zu B arrived wrong (first %02x last %02x)\n", bytes,
                                first, last);
                    bad = 1;
                }
            }
            if (me == 0) {
                float ms = 0;
                CHECK(cudaEventElapsedTime(&ms, start, stop));
                double us = ms * 1000.0 / n;
                std::printf("nvshmem put putmem_nbi_block %zu B [%s, %d blocks]  time %.3f us  algbw %.2f GB/s\n",
                            bytes, put_where.c_str(), blocks, us, static_cast<double>(bytes) / us / 1e3);
                std::fflush(stdout);
            }
        }
    }
    nvshmem_barrier_all();
    CHECK(cudaFree(src));
    nvshmem_free(dst);
    nvshmem_free(pp_data);
    nvshmem_free(signal);
    nvshmem_free(where);
    CHECK(cudaFree(peer_where));
    nvshmem_finalize();
    return bad;
}
