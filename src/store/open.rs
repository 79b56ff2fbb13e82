//! Opening a store: recovery replays the log's records into the index.

use super::*;

impl<S: State> Store<S> {
    /// Opens the store in `dir` with default options, creating it if needed, and recovers
    /// every durable commit.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, Options::default())
    }

    /// Opens (or creates) the store in `dir` with `options`.
    pub fn open_with(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_on(Arc::new(RealStorage), dir, options)
    }

    /// Like [`open_with`](Self::open_with), on the given storage (tests run the engine on
    /// a simulated one to inject crashes and I/O errors).
    pub fn open_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        Self::recover(options, |visit| {
            Log::open_on(storage, dir, options.log_options(), visit)
        })
    }

    /// Opens the store read-only: it takes no lock and writes nothing, so it works while
    /// a writer (another process, say) runs; it sees what was durable when it opened.
    /// Writes return [`Error::ReadOnly`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_read_only_with(dir, Options::default())
    }

    /// Like [`open_read_only`](Self::open_read_only), honouring `options.recovery` (e.g.
    /// `Salvage` to read a damaged store) and retention; durability and compaction
    /// options are irrelevant to a reader.
    pub fn open_read_only_with(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_read_only_on(Arc::new(RealStorage), dir, options)
    }

    /// Like [`open_read_only_with`](Self::open_read_only_with), on the given storage.
    pub fn open_read_only_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: Options,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        Self::recover(options, |visit| {
            Log::open_read_only_on(storage, dir, options.log_options(), visit)
        })
    }

    pub(super) fn recover(
        options: Options,
        open: impl FnOnce(&mut dyn FnMut(RecordRef<'_>) -> Result<()>) -> Result<Log>,
    ) -> Result<Self> {
        validate_options(&options)?;
        let started = Instant::now();
        let index = Index::new(S::VERSION);
        let salvage = options.recovery == RecoveryMode::Salvage;
        let mut replayer = replay::Replayer::new(&index, salvage);
        let log = open(&mut |rec| replayer.visit(rec))?;
        let mut lost = replayer.finish()?;
        if salvage {
            salvage::name_skipped_checkpoints(&log, &index, &mut lost);
        }
        let r = log.recovery();
        let report = RecoveryReport {
            records: r.records,
            bytes: r.bytes,
            segments: r.segments,
            torn_bytes: r.torn_bytes,
            skipped: r.skipped.clone(),
            lost,
            tasks: index.task_count() as u64,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            tasks = report.tasks,
            records = report.records,
            torn_bytes = report.torn_bytes,
            elapsed_ms = report.elapsed_ms,
            "store opened"
        );
        let inner = Arc::new(Inner {
            log,
            index,
            options,
            report,
            commits: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            relocation: Arc::new(parking_lot::RwLock::new(())),
            gates: Arc::default(),
            compactor: parking_lot::Mutex::new(()),
        });
        let compactor = (options.auto_compact && !inner.log.is_read_only())
            .then(|| compaction::spawn_background(Arc::downgrade(&inner)))
            .flatten();
        Ok(Store {
            _compactor: Arc::new(compactor),
            inner,
            cache: Arc::new(cache::StateCache::new(options.cache_bytes)),
            _state: PhantomData,
        })
    }
}

fn validate_options(options: &Options) -> Result<()> {
    if options.snapshot_every == 0 {
        return Err(Error::InvalidArgument(
            "snapshot_every must be at least 1".into(),
        ));
    }
    if options.keep_checkpoints == Some(0) {
        return Err(Error::InvalidArgument(
            "keep_checkpoints must be at least 1 (the latest checkpoint is always kept)".into(),
        ));
    }
    compress::validate(options.compression)
}
