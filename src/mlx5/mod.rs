//! ConnectX ports through rdma-core: `mlx5:` (Direct Verbs when available) and `verbs:` (ibverbs).

use crate::spec::{Backend, PortOptions};
use crate::Error;

pub(crate) fn open_port(kind: &str, rest: &str, _opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    Err(Error::Spec(format!(
        "{kind}:{rest}: ports are not available in this build yet"
    )))
}
