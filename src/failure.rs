//! How a queue fails, in words every backend shares: a [`Failure`] says what went wrong as a
//! neutral [`FailureKind`] and keeps the device's own code (the mlx5 completion syndrome) as
//! detail.

use mlx5_prm::syndrome;

/// What went wrong with a completion, whichever backend reported it. The kinds are those a
/// raw-packet queue meets; mlx5 names them in its completion syndromes (PRM "Completion with
/// Error" table; rdma-core providers/mlx5/cq.c `mlx5_handle_error_cqe` maps them to the
/// `IBV_WC_*` statuses one to one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// A frame longer than the queue or the device takes (mlx5 `LOCAL_LENGTH`,
    /// `IBV_WC_LOC_LEN_ERR`).
    LocalLength,
    /// A descriptor the device refused as malformed (mlx5 `LOCAL_QP_OP`, `IBV_WC_LOC_QP_OP_ERR`).
    LocalOperation,
    /// A buffer outside the memory registered for the queue (mlx5 `LOCAL_PROT`,
    /// `IBV_WC_LOC_PROT_ERR`).
    Protection,
    /// Discarded because an earlier error stopped the queue (mlx5 `WR_FLUSH`,
    /// `IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    /// Anything else the device reported.
    Other,
    /// The queue's completion queue went into error (`IBV_EVENT_CQ_ERR`, an overrun): nothing
    /// completes any more; the queue must be opened again.
    CqError,
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureKind::LocalLength => "frame too long for the queue",
            FailureKind::LocalOperation => "descriptor refused as malformed",
            FailureKind::Protection => "buffer outside the registered memory",
            FailureKind::Flushed => "flushed after an earlier error",
            FailureKind::Other => "completion error",
            FailureKind::CqError => "completion queue in error (overrun); reopen the queue",
        })
    }
}

/// A failed completion: its neutral kind, and the device's own code where it has one.
///
/// ```
/// use rawpkt::{Failure, FailureKind};
/// fn explain(f: Failure) -> String {
///     match f.kind {
///         FailureKind::LocalLength => format!("a frame was too long: {f}"),
///         _ => format!("the queue failed: {f}"),
///     }
/// }
/// # let _ = explain;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The mlx5 completion syndrome (for the ibverbs datapath, the one its `IBV_WC_*` status
    /// stands for); None where the backend has no such code.
    pub syndrome: Option<u8>,
}

/// The syndrome of a completion status that stands for no mlx5 syndrome (none is 0xff).
pub(crate) const NO_SYNDROME: u8 = 0xff;

impl Failure {
    /// The failure an mlx5 completion syndrome reports (the PRM's "Completion with Error"
    /// table; rdma-core `mlx5_handle_error_cqe`).
    ///
    /// ```
    /// use rawpkt::{Failure, FailureKind};
    /// let f = Failure::from_mlx5(0x04);
    /// assert_eq!((f.kind, f.syndrome), (FailureKind::Protection, Some(0x04)));
    /// ```
    pub fn from_mlx5(syndrome: u8) -> Failure {
        let kind = match syndrome {
            syndrome::LOCAL_LENGTH => FailureKind::LocalLength,
            syndrome::LOCAL_QP_OP => FailureKind::LocalOperation,
            syndrome::LOCAL_PROT => FailureKind::Protection,
            syndrome::WR_FLUSH => FailureKind::Flushed,
            _ => FailureKind::Other,
        };
        Failure {
            kind,
            syndrome: (syndrome != NO_SYNDROME).then_some(syndrome),
        }
    }
}

impl Failure {
    /// The failure of a queue whose CQ went into error (an asynchronous event, no syndrome).
    pub(crate) fn cq_error() -> Failure {
        Failure {
            kind: FailureKind::CqError,
            syndrome: None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.syndrome {
            Some(s) => write!(f, "{} (completion syndrome {s:#04x})", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}
