//! Files the tools open by name (a stream file, a replay, a capture), taken only where nothing
//! can wait on them: regular files, read up to a size, with every other kind of path refused in
//! one line before a byte is read (see `rawpkt_sys::file`, which the model's trace file
//! and rdma-core's libraries go through too).

pub use rawpkt_sys::file::{
    check_regular, create_write, kind_of, not_regular, open_read, read_at_most, read_stdin_at_most, refused,
};
pub use rawpkt_sys::file::{NotRegular, TooLarge};
