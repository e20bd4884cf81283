"""The failure policy: what a task's end means for its job, as Kubeflow's TFJob decides it.

Exit code 0: the task is done.  1-127: a permanent error (a bug, a bad argument, a missing
module): running it again would fail again, so the job fails.  128-255 (killed by a signal: the
OOM killer, a reboot, someone's ``kill``) and an unknown status (a server that vanished): worth
another try, while the job's restart budget (``--restart-limit``, TFJob's backoff limit, for the
whole job) lasts.  A lost node or a dead ps is not the task's fault and not for this policy: the
launcher fails the job at once, naming the node.
"""

from dataclasses import dataclass

DONE, RESTART, FAIL = "done", "restart", "fail"


def exit_class(code: int | None) -> str:
    """"success", "permanent" or "retryable"."""
    if code == 0:
        return "success"
    if code is not None and 1 <= code <= 127:
        return "permanent"
    return "retryable"


@dataclass
class Budget:
    limit: int
    used: int = 0

    def decide(self, code: int | None) -> tuple[str, str]:
        """(DONE | RESTART | FAIL, why) for a task that ended with ``code``; a RESTART spends one."""
        kind = exit_class(code)
        if kind == "success":
            return DONE, "exited 0"
        if kind == "permanent":
            return FAIL, "a permanent error (exit codes 1-127 are not retried)"
        if self.used >= self.limit:
            return FAIL, f"--restart-limit {self.limit} reached" if self.limit else "not restarted (--restart-limit 0)"
        self.used += 1
        return RESTART, f"restart {self.used} of {self.limit}"
