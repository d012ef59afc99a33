//! Building board firmware and running it under QEMU: being written.
