// A std::recursive_mutex that clang's thread-safety analysis knows as a
// capability (-Wthread-safety; scripts/thread_safety.sh), so that fields and
// helpers can be ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED it.
//
// Recursive only because Store::Transaction's fn may call the store's public
// methods on the thread that holds it. The analysis sees one function at a
// time and does not model re-locking: code it checks must not lock a
// RecursiveMutex it already holds (call the *Locked helper instead).
#ifndef FCA_STORAGE_RECURSIVE_MUTEX_H_
#define FCA_STORAGE_RECURSIVE_MUTEX_H_

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace fca::storage {

class ABSL_LOCKABLE RecursiveMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    if (depth_++ == 0) owner_.store(std::this_thread::get_id());
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (--depth_ == 0) owner_.store(std::thread::id());
    mu_.unlock();
  }
  // Whether the calling thread holds it (Store: a read inside one of its
  // transactions must see that transaction's writes).
  bool HeldByThisThread() const { return owner_.load() == std::this_thread::get_id(); }

 private:
  std::recursive_mutex mu_;
  int depth_ = 0;  // changed only by the thread holding mu_
  // Another thread may read it while the holder changes it: only the
  // holder's own id can ever compare equal.
  std::atomic<std::thread::id> owner_{};
};

// Holds a RecursiveMutex for its scope.
class ABSL_SCOPED_LOCKABLE RecursiveMutexLock {
 public:
  explicit RecursiveMutexLock(RecursiveMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~RecursiveMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  RecursiveMutexLock(const RecursiveMutexLock&) = delete;
  RecursiveMutexLock& operator=(const RecursiveMutexLock&) = delete;

 private:
  RecursiveMutex* const mu_;
};

}  // namespace fca::storage

#endif  // FCA_STORAGE_RECURSIVE_MUTEX_H_
