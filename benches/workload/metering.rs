//! What the kernel counts for us: bytes written (/proc/self/io and the block device's
//! counters), file sizes, thread, process and machine CPU time (/proc/stat), RSS, the
//! mount holding the stores and how slow an fdatasync is right now.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::measurement::median_duration;

/// The `stat` file of the block device holding the stores (set once by `main`).
static DEVICE_STAT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// `/sys/class/block/<name>/stat` for a device path such as `/dev/vda`, if it exists.
fn device_stat_path(dev: &str) -> Option<PathBuf> {
    let name = Path::new(dev).file_name()?;
    let path = Path::new("/sys/class/block").join(name).join("stat");
    path.exists().then_some(path)
}

/// Makes `io_counters` read the counters of the block device holding `base`.
pub fn count_device_of(base: &Path) {
    let _ = DEVICE_STAT.set(device_stat_path(&mount_of(base).1));
}

/// Bytes written to the stores' block device so far (sectors written × 512), or `None`
/// when the device's counters cannot be read.
fn device_written() -> Option<u64> {
    let path = DEVICE_STAT.get()?.as_ref()?;
    let text = std::fs::read_to_string(path).ok()?;
    let sectors: u64 = text.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// (bytes handed to write syscalls by this process, bytes written to the stores' block
/// device) so far. The device figure is the block layer's own count, so it includes
/// metadata and any other I/O on that device while a run lasts; where the device's
/// counters cannot be read it falls back to `write_bytes`, which counts every page (or
/// large folio) each time it is dirtied and so overstates what reaches the disk.
pub fn io_counters() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let device = device_written().unwrap_or_else(|| field("write_bytes:"));
    (field("wchar:"), device)
}

/// Bytes this process made the storage layer read so far (`read_bytes` in /proc/self/io;
/// page-cache hits not counted).
pub fn read_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:")?.trim().parse().ok())
        .unwrap_or(0)
}

pub fn io_since(before: (u64, u64)) -> (u64, u64) {
    let now = io_counters();
    (now.0 - before.0, now.1 - before.1)
}

/// Sum of file sizes and of allocated bytes under `dir`.
pub fn dir_usage(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).expect("read the store directory") {
        let entry = entry.expect("read the store directory");
        let meta = entry.metadata().expect("stat a store file");
        if meta.is_dir() {
            let (len, alloc) = dir_usage(&entry.path());
            total.0 += len;
            total.1 += alloc;
        } else {
            total.0 += meta.len();
            total.1 += meta.blocks() * 512;
        }
    }
    total
}

/// p50 of 16 `pwrite` (4 KiB) + `sync_data` into an already written file under `base`:
/// what one fdatasync costs on this disk right now (other processes' I/O shows here).
fn disk_probe(cfg: &Config) -> f64 {
    use std::os::unix::fs::FileExt;
    let dir = cfg.tmpdir("bench-workload-probe-");
    let file = File::create(dir.path().join("probe")).expect("create the probe file");
    file.write_all_at(&[0u8; 64 << 10], 0)
        .expect("write the probe file");
    file.sync_all().expect("sync the probe file");
    let block = [0x5Au8; 4096];
    let mut times: Vec<Duration> = (0..16u64)
        .map(|i| {
            let t0 = Instant::now();
            file.write_all_at(&block, i * 4096).expect("write");
            file.sync_data().expect("sync_data");
            t0.elapsed()
        })
        .collect();
    median_duration(&mut times).as_secs_f64() * 1e6
}

/// Probes the disk; with `calm_us` set, waits up to 30 s for the probe to come down.
pub fn wait_for_calm_disk(cfg: &Config) -> f64 {
    let started = Instant::now();
    loop {
        let probe = disk_probe(cfg);
        if cfg.calm_us <= 0.0 || probe <= cfg.calm_us || started.elapsed() > Duration::from_secs(30)
        {
            return probe;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// CPU time this thread has used so far, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's resource usage so far, every thread's (joined ones included).
fn rusage_self() -> libc::rusage {
    // SAFETY: all-zero bytes are a valid `rusage` (integers and timevals).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is a constant Linux knows.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF)");
    usage
}

fn timeval_ns(tv: libc::timeval) -> u64 {
    tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000
}

/// Jiffies of all cores so far, from /proc/stat's aggregate `cpu` line: the total, and
/// the part spent idle or waiting for I/O (a core in iowait could have run something).
#[derive(Clone, Copy)]
struct MachineTicks {
    total: u64,
    idle: u64,
}

/// `None` when /proc/stat is missing or its `cpu` line is not what Linux writes.
fn machine_ticks() -> Option<MachineTicks> {
    parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Fields: user nice system idle iowait irq softirq steal guest guest_nice. Only the
/// first eight are summed, since the kernel already counts guest time inside user and
/// nice; older kernels write fewer, and the sum is then of what there is.
fn parse_cpu_line(stat: &str) -> Option<MachineTicks> {
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let idle = ticks.get(3)?.checked_add(*ticks.get(4)?)?;
    let total = ticks.iter().try_fold(0u64, |sum, &t| sum.checked_add(t))?;
    Some(MachineTicks { total, idle })
}

/// Jiffies per second (`USER_HZ`), the unit of /proc/stat.
pub fn clock_ticks_per_s() -> Option<f64> {
    // SAFETY: sysconf only reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(hz as f64)
}

/// Cores online, the ones /proc/stat's `cpu` line sums (not this process's affinity).
pub fn online_cores() -> Option<f64> {
    // SAFETY: sysconf only reads a value of the running system.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (n > 0).then_some(n as f64)
}

/// How busy the whole machine was between two readings: every core, every process and
/// kernel thread (jbd2, kworkers, interrupts), which the process's own counters miss.
#[derive(Clone, Copy, Debug)]
pub struct MachineBusy {
    /// Busy share of all cores' time, 0 to 1 (steal, the hypervisor running another
    /// guest, counts as busy: the core was not ours to use).
    pub fraction: f64,
    /// Busy CPU time summed over the cores, in seconds.
    pub cpu_s: f64,
    /// Jiffies all cores counted meanwhile: one either way moves `fraction` by 1/ticks.
    pub ticks: u64,
}

/// `None` when a reading is missing, the counters went backwards or no tick passed (a
/// run shorter than a jiffy per core).
fn busy_between(a: Option<MachineTicks>, b: Option<MachineTicks>) -> Option<MachineBusy> {
    let (a, b) = (a?, b?);
    let total = b.total.checked_sub(a.total).filter(|&t| t > 0)?;
    // iowait may step back on some kernels (its per-core sum is an estimate): saturate.
    let busy = total.saturating_sub(b.idle.saturating_sub(a.idle));
    Some(MachineBusy {
        fraction: busy as f64 / total as f64,
        cpu_s: busy as f64 / clock_ticks_per_s()?,
        ticks: total,
    })
}

/// The whole-process and whole-machine counters at one instant; `drive` reads them at
/// the common start and after every worker's last commit.
pub struct Meters {
    minor_faults: u64,
    process_cpu_ns: u64,
    machine: Option<MachineTicks>,
}

/// What those counters moved between two instants.
pub struct Metered {
    /// Minor page faults, every thread's: memory touched for the first time, which a
    /// fresh process pays for where a long-lived one reuses its heap.
    pub minor_faults: u64,
    /// User + system CPU time of every thread of the process (background ones too).
    pub process_cpu_ns: u64,
    pub machine: Option<MachineBusy>,
}

impl Meters {
    pub fn now() -> Self {
        let usage = rusage_self();
        Meters {
            minor_faults: usage.ru_minflt as u64,
            process_cpu_ns: timeval_ns(usage.ru_utime) + timeval_ns(usage.ru_stime),
            machine: machine_ticks(),
        }
    }

    pub fn since(&self) -> Metered {
        let now = Meters::now();
        Metered {
            minor_faults: now.minor_faults - self.minor_faults,
            process_cpu_ns: now.process_cpu_ns - self.process_cpu_ns,
            machine: busy_between(self.machine, now.machine),
        }
    }
}

/// (RssAnon, RssFile) of this process, in bytes.
pub fn rss() -> (i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let field = |name: &str| -> i64 {
        status
            .lines()
            .find_map(|l| {
                let kb = l.strip_prefix(name)?.trim().strip_suffix("kB")?;
                kb.trim().parse::<i64>().ok()
            })
            .unwrap_or(0)
            * 1024
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// Filesystem type and device of the mount holding `path`.
pub fn mount_of(path: &Path) -> (String, String) {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !path.starts_with(f[1]) {
            continue;
        }
        if best.as_ref().is_none_or(|(len, _, _)| f[1].len() >= *len) {
            best = Some((f[1].len(), f[2].to_string(), f[0].to_string()));
        }
    }
    best.map_or(("unknown".into(), "unknown".into()), |(_, fs, dev)| {
        (fs, dev)
    })
}
