// The one system call of R69's fencing that a test cannot provoke without
// another user's process: pidfd_send_signal(2) (FenceStuckMember). Tests
// replace it to see what a member does when the kernel refuses the signal
// (EPERM: the stuck member runs under another uid).
#pragma once

namespace mq::fence_seam {

// pidfd_send_signal(pidfd, sig, nullptr, 0): 0, or -1 with errno set.
using SendSignal = int (*)(int pidfd, int sig);
// The system call itself unless a test set another.
extern SendSignal send_signal;

}  // namespace mq::fence_seam
