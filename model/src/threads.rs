//! Matmul threads for the host binaries: `--threads N` (default: the available parallelism),
//! applied process-wide by [`edgekv_llm::matmul::set_threads`] (each matmul's output rows shared
//! between N threads; the same bits at any N).

use crate::error::{Error, Result};

pub use edgekv_llm::matmul::{set_threads, threads};

/// The thread count `args` ask for with `--threads N` or `--threads=N`, else the available
/// parallelism (1 when it is unknown).
///
/// # Errors
///
/// [`Error::Input`] when the flag has no value or one that is not a number ≥ 1.
pub fn threads_arg(args: &[String]) -> Result<usize> {
    let mut value = None;
    for (i, a) in args.iter().enumerate() {
        if a == "--threads" {
            value = Some(args.get(i + 1).map(String::as_str).unwrap_or(""));
        } else if let Some(v) = a.strip_prefix("--threads=") {
            value = Some(v);
        }
    }
    match value {
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(Error::Input(format!(
                "--threads takes a number of threads >= 1, not {v:?}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_flag_or_the_available_parallelism() {
        assert_eq!(threads_arg(&args(&["-i", "--threads", "3"])).unwrap(), 3);
        assert_eq!(threads_arg(&args(&["--threads=2"])).unwrap(), 2);
        assert!(threads_arg(&args(&[])).unwrap() >= 1);
        for bad in [&["--threads"][..], &["--threads", "0"], &["--threads=x"]] {
            assert!(threads_arg(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
