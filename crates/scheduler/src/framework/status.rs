//! `Status`: what a plugin answers at an extension point, and what that answer does to the pod.

use std::borrow::Cow;
use std::fmt;

/// The outcome class of a plugin call (`framework.Code`).
///
/// Each variant says what the scheduler does with the pod when a plugin returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin ran and the pod may proceed to the next plugin / extension point.
    Success,
    /// An internal error (bad input, a failed API call, a bug). The scheduling attempt is aborted
    /// and the pod goes to the backoffQ: it is retried after its backoff, whatever cluster events
    /// happen. Preemption is not attempted. The pod's condition gets reason `SchedulerError`.
    Error,
    /// The pod does not fit the node *now*. During Filter: the node is rejected; if every node is
    /// rejected, PostFilter (preemption) runs because evicting lower-priority pods may help, and
    /// the pod is parked in the unschedulable pool until a cluster event the rejecting plugins
    /// registered for (or the 5-minute flush) moves it back.
    Unschedulable,
    /// Like [`Code::Unschedulable`], but preemption cannot help on this node (e.g. a node
    /// selector mismatch): the node is not even tried by PostFilter. The pod is parked the same way.
    UnschedulableAndUnresolvable,
    /// Permit only: the pod is held (it stays assumed on its node) until a plugin allows or rejects
    /// it, or the timeout returned with the status expires (then it is rejected and requeued).
    Wait,
    /// PreFilter/PreScore: the plugin has nothing to do for this pod; its Filter/Score is skipped
    /// for this cycle. Bind: this binder does not handle the pod; the next one is asked.
    Skip,
}

impl Code {
    /// The name Kubernetes prints for this code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
        }
    }
}

/// A plugin's answer (`framework.Status`): a [`Code`], user-facing reasons, and the plugin that
/// produced it (filled in by the framework runtime).
///
/// The success status allocates nothing. Reasons are the exact strings Kubernetes uses (e.g.
/// `"Insufficient cpu"`), because they are aggregated into the FailedScheduling event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: Vec<Cow<'static, str>>,
    plugin: String,
}

impl Default for Status {
    fn default() -> Self {
        Self::success()
    }
}

impl Status {
    /// A status with a code and one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        Self { code, reasons: vec![reason.into()], plugin: String::new() }
    }

    /// A status with a code and several reasons (e.g. `Insufficient cpu`, `Insufficient memory`).
    pub fn with_reasons(code: Code, reasons: Vec<Cow<'static, str>>) -> Self {
        Self { code, reasons, plugin: String::new() }
    }

    /// The success status.
    pub const fn success() -> Self {
        Self { code: Code::Success, reasons: Vec::new(), plugin: String::new() }
    }

    /// [`Code::Error`] with a message.
    pub fn error(msg: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Error, msg)
    }

    /// [`Code::Unschedulable`] with a reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// [`Code::UnschedulableAndUnresolvable`] with a reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// [`Code::Skip`].
    pub const fn skip() -> Self {
        Self { code: Code::Skip, reasons: Vec::new(), plugin: String::new() }
    }

    /// [`Code::Wait`].
    pub const fn wait() -> Self {
        Self { code: Code::Wait, reasons: Vec::new(), plugin: String::new() }
    }

    /// Records the plugin that produced this status (done by the framework runtime).
    pub fn with_plugin(mut self, plugin: &str) -> Self {
        if self.plugin.is_empty() {
            self.plugin = plugin.to_string();
        }
        self
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, in order.
    pub fn reasons(&self) -> &[Cow<'static, str>] {
        &self.reasons
    }

    /// The plugin that produced the status ("" when not known).
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Whether the code is [`Code::Success`].
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Whether the code is [`Code::Skip`].
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Whether the code is [`Code::Wait`].
    pub fn is_wait(&self) -> bool {
        self.code == Code::Wait
    }

    /// Whether the pod was rejected ([`Code::Unschedulable`] or
    /// [`Code::UnschedulableAndUnresolvable`]).
    pub fn is_rejected(&self) -> bool {
        matches!(self.code, Code::Unschedulable | Code::UnschedulableAndUnresolvable)
    }

    /// The reasons joined with ", " (`Status.Message`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.plugin.is_empty() {
            write!(f, "{}: {}", self.code.as_str(), self.message())
        } else {
            write!(f, "{} ({}): {}", self.code.as_str(), self.plugin, self.message())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_joins_reasons_with_comma() {
        let s =
            Status::with_reasons(Code::Unschedulable, vec!["Insufficient cpu".into(), "Insufficient memory".into()]);
        assert_eq!(s.message(), "Insufficient cpu, Insufficient memory");
        assert!(s.is_rejected());
        assert!(!Status::success().is_rejected());
    }

    #[test]
    fn with_plugin_keeps_the_first_plugin_name() {
        let s = Status::unschedulable("x").with_plugin("A").with_plugin("B");
        assert_eq!(s.plugin(), "A");
        assert_eq!(s.to_string(), "Unschedulable (A): x");
    }
}
