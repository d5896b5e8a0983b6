//! The data path: one pinned thread per stream (`stream`: TCP senders and receivers,
//! block headers and their echoes, zero-copy, the single engine, record batches; `udp`:
//! datagrams and their counts), user-space pacing (`pace`), page-aligned buffers
//! (`page_buf`), CPU placement (`pin`), and one end's threads of a test, per direction,
//! driven alike by client and server (`ends`), and the budget of `-n`/`-k` they share
//! (`budget`).

pub(crate) mod budget;
pub(crate) mod ends;
pub(crate) mod pace;
pub(crate) mod page_buf;
pub(crate) mod pin;
pub mod stream;
pub(crate) mod udp;
