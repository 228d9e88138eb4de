// One pool of worker threads for the life of the library. parallel_for cuts [0, n) into one
// contiguous range per thread (the calling thread takes the first), so a result computed per
// index never depends on how many threads there are. Between jobs a worker spins for a while
// (a decode step's GEMVs come tens of microseconds apart; waking a sleeping thread costs about
// as much as a small GEMV), then sleeps on a condition variable. Calls from several host
// threads are serialized.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() std::this_thread::yield()
#endif

namespace strata {

class ThreadPool {
public:
    ThreadPool() { resize(usable_cores()); }
    ~ThreadPool() {
        std::lock_guard<std::mutex> call(call_mutex_);
        if (forked()) {  // the workers are the parent's: nothing to join here
            new std::vector<std::thread>(std::move(workers_));
            return;
        }
        stop();
    }

    // The cores this process may run on (its affinity mask), at least 1.
    static int usable_cores() {
#if defined(__linux__)
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
        const unsigned hw = std::thread::hardware_concurrency();
        return hw ? (int)hw : 1;
    }

    int size() const { return threads_; }

    void resize(int n) {
        std::lock_guard<std::mutex> call(call_mutex_);
        if (forked()) new std::vector<std::thread>(std::move(workers_));  // the parent's, never joined
        else stop();
        owner_ = getpid();
        threads_ = n;
        quit_.store(false);
        const uint64_t now = generation_.load();  // a new worker waits for the next job
        for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, now] { work(i, now); });
    }

    // body(begin, end) on contiguous ranges of [0, n); ranges hold at least `grain` indices
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
        if (n <= 0) return;
        std::lock_guard<std::mutex> call(call_mutex_);
        int64_t parts = threads_;
        if (grain > 0 && n / grain < parts) parts = n / grain > 0 ? n / grain : 1;
        if (parts <= 1 || forked()) {  // a forked child has no workers until strata_set_threads
            body(0, n);
            return;
        }
        body_ = &body;
        n_ = n;
        parts_ = parts;
        pending_.store((int)parts - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
        if (sleepers_.load() > 0) {
            std::lock_guard<std::mutex> lock(mutex_);
            wake_.notify_all();
        }
        body(0, n / parts);
        // yield, not pause: on a machine with more runnable threads than cores the workers need it
        while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    }

private:
    bool forked() const { return getpid() != owner_; }

    void work(int index, uint64_t seen) {
        for (;;) {
            // spin about a millisecond's worth of pauses, then sleep
            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(500);
            int polls = 0;
            while (generation_.load(std::memory_order_acquire) == seen && !quit_.load()) {
                if (++polls % 16 == 0) std::this_thread::yield(); else STRATA_PAUSE();
                if (polls % 256 == 0 && std::chrono::steady_clock::now() > until) {
                    std::unique_lock<std::mutex> lock(mutex_);
                    sleepers_.fetch_add(1);
                    wake_.wait(lock, [&] { return quit_.load() || generation_.load() != seen; });
                    sleepers_.fetch_sub(1);
                    break;
                }
            }
            if (quit_.load()) return;
            seen = generation_.load(std::memory_order_acquire);
            if (index < parts_) {
                (*body_)(n_ * index / parts_, n_ * (index + 1) / parts_);
                pending_.fetch_sub(1, std::memory_order_release);
            }
        }
    }

    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            quit_.store(true);
            wake_.notify_all();
        }
        for (auto& t : workers_) t.join();
        workers_.clear();
    }

    std::mutex call_mutex_, mutex_;
    std::condition_variable wake_;
    std::vector<std::thread> workers_;
    const std::function<void(int64_t, int64_t)>* body_ = nullptr;
    int64_t n_ = 0, parts_ = 0;
    std::atomic<int> pending_{0}, sleepers_{0};
    std::atomic<uint64_t> generation_{0};
    std::atomic<bool> quit_{false};
    int threads_ = 1;
    pid_t owner_ = 0;  // the process whose threads the workers are
};

}  // namespace strata
