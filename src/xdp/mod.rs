//! AF_XDP ports (`xdp:IFNAME[/QUEUE]`).

use crate::spec::{Backend, PortOptions};
use crate::Error;

pub(crate) fn open_port(rest: &str, _opts: &PortOptions) -> Result<Box<dyn Backend>, Error> {
    Err(Error::Spec(format!(
        "xdp:{rest}: AF_XDP ports are not available in this build yet"
    )))
}
