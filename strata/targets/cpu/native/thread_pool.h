// One pool of worker threads for the life of the library. parallel_for cuts [0, n) into one
// contiguous range per thread (the calling thread takes the first), so a result computed per
// index never depends on how many threads there are. Calls from several host threads are
// serialized.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
public:
    ThreadPool() {
        unsigned hw = std::thread::hardware_concurrency();
        resize(hw ? (int)hw : 1);
    }
    ~ThreadPool() { stop(); }

    int size() const { return threads_; }

    void resize(int n) {
        std::lock_guard<std::mutex> call(call_mutex_);
        stop();
        threads_ = n;
        quit_ = false;
        // A new worker waits for the next job, not the last one run before it started.
        for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, seen = generation_] { work(i, seen); });
    }

    // body(begin, end) on contiguous ranges of [0, n); ranges hold at least `grain` indices
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
        if (n <= 0) return;
        std::lock_guard<std::mutex> call(call_mutex_);
        int64_t parts = threads_;
        if (grain > 0 && n / grain < parts) parts = n / grain > 0 ? n / grain : 1;
        if (parts <= 1) {
            body(0, n);
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            body_ = &body;
            n_ = n;
            parts_ = parts;
            pending_.store((int)parts - 1);
            ++generation_;
        }
        wake_.notify_all();
        body(0, n / parts);
        while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    }

private:
    void work(int index, uint64_t seen) {
        for (;;) {
            const std::function<void(int64_t, int64_t)>* body;
            int64_t n, parts;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
                if (quit_) return;
                seen = generation_;
                body = body_;
                n = n_;
                parts = parts_;
            }
            if (index < parts) {
                (*body)(n * index / parts, n * (index + 1) / parts);
                pending_.fetch_sub(1, std::memory_order_release);
            }
        }
    }

    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            quit_ = true;
        }
        wake_.notify_all();
        for (auto& t : workers_) t.join();
        workers_.clear();
    }

    std::mutex call_mutex_, mutex_;
    std::condition_variable wake_;
    std::vector<std::thread> workers_;
    const std::function<void(int64_t, int64_t)>* body_ = nullptr;
    int64_t n_ = 0, parts_ = 0;
    std::atomic<int> pending_{0};
    uint64_t generation_ = 0;
    bool quit_ = false;
    int threads_ = 1;
};

}  // namespace strata
