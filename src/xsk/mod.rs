//! AF_XDP socket memory shared by the burst paths: the socket over a pool's memory (its UMEM) and
//! its four rings (fill, completion, RX, TX), with the record of which pool buffers the kernel
//! holds. The control path (`crate::xdp`: the port, its XDP program and XSKMAP, queue ids) opens
//! sockets and hands them to `rx::xdp` and `tx::xdp`; this room knows nothing of either, so the
//! graph is `xdp -> rx/tx -> xsk`, `xdp -> xsk`, and never back.

pub(crate) mod ring;
pub(crate) mod socket;
