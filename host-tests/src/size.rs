//! Size report of the board firmware (`cargo xtask size`): being written.
