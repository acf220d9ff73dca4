//! The runtime crate against a real broker: the tasks topic and its partitions.

mod topics;
