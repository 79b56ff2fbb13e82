//! Connections: the runtime the handle owns, a small pool, deadlines on every call, and
//! which failures leave a call's outcome known.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, sleep, timeout_at};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Row, Socket, Statement};

use super::PgOptions;
use super::hint::Hints;
use super::toast::Toast;
use crate::error::{Error, Result};

/// Pause between attempts after a connection failure (a server restarting, a stale pooled
/// connection), so that a retry loop does not spin until its deadline.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Why one attempt at a call failed.
pub(super) enum Fail {
    /// An answer of the API (a conflict, a fenced writer, an unknown task): final, and
    /// whatever transaction the attempt had open was rolled back.
    Api(Error),
    /// The client or the server failed; `definite` tells whether the outcome is known.
    Db(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Api(e)
    }
}

/// Result of one attempt.
pub(super) type Attempt<T> = std::result::Result<T, Fail>;

/// Whether a failed statement certainly did not commit: the server answered with an error
/// about the statement itself. Not so for a dropped connection, nor for the errors a server
/// sends while it shuts down or crashes (classes 08, 57, 58, 53 and XX): a backend told to
/// quit may already have made its COMMIT durable.
pub(super) fn definite(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else {
        return false;
    };
    let class = &db.code().code()[..2];
    !matches!(class, "08" | "57" | "58" | "53" | "XX")
}

/// An `Error::Postgres` for `e`, met while doing `context`.
pub(super) fn pg_error(context: &str, e: &tokio_postgres::Error) -> Error {
    let message = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    Error::Postgres {
        context: context.to_string(),
        message,
    }
}

/// Reading a row's columns without panicking.
pub(super) trait RowExt {
    /// Column `idx` as `T`. A column of another type means the tables are not the ones
    /// this build created (another program's tables under the same schema): an error,
    /// never a panic.
    fn col<'a, T: FromSql<'a>>(&'a self, idx: usize) -> Attempt<T>;
}

impl RowExt for Row {
    fn col<'a, T: FromSql<'a>>(&'a self, idx: usize) -> Attempt<T> {
        self.try_get(idx).map_err(|e| {
            Fail::Api(Error::Postgres {
                context: "reading a row".into(),
                message: format!(
                    "column {idx} does not hold what agentwal writes ({e}); are these agentwal's tables (PgOptions::schema)?"
                ),
            })
        })
    }
}

/// A connection's I/O half: it writes the client's requests to the socket and hands the
/// server's answers back. Whichever call holds the connection polls it (`driven`).
type Driver = Connection<Socket, NoTlsStream>;

/// A pooled connection: the client, its I/O half, and how many times its server said it
/// cancelled a COMMIT's wait for a synchronous standby (docs/postgres.md §5), counted as
/// the I/O half reads the notice, before the COMMIT's answer that follows it.
pub(super) struct Conn {
    client: Client,
    /// `None` once the connection ended (the server closed it, or it failed). In a mutex
    /// only so that `Conn` is `Sync` (`&Conn` is held across awaits); it is reached
    /// through `&mut` only, which takes no lock.
    driver: Mutex<Option<Driver>>,
    sync_rep_cancels: Arc<AtomicU64>,
    /// The statements prepared on this connection, by their text (`statements.rs`).
    statements: Mutex<HashMap<&'static str, Statement>>,
    /// The hot reads this connection ran once by their text (`statements::query_hot`).
    ran_once: Mutex<HashSet<&'static str>>,
}

impl Conn {
    /// `sql` as prepared on this connection, if it is.
    pub fn cached(&self, sql: &str) -> Option<Statement> {
        self.statements.lock().get(sql).cloned()
    }

    /// Whether this connection ran `sql` before (by its text); notes that it has now.
    pub fn ran_before(&self, sql: &'static str) -> bool {
        !self.ran_once.lock().insert(sql)
    }

    /// Keeps `stmt`, prepared on this connection from `sql`, for the calls after.
    pub fn remember(&self, sql: &'static str, stmt: Statement) {
        self.statements.lock().insert(sql, stmt);
    }

    /// Prepares each of `statements` (text and parameter types) that this connection has
    /// not prepared yet: one round trip each, once per connection. Returns how many it
    /// prepared.
    pub async fn prepare_cached(
        &self,
        statements: &[(&'static str, &[Type])],
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        let mut prepared = 0;
        for &(sql, types) in statements {
            if self.cached(sql).is_none() {
                let stmt = self.client.prepare_typed(sql, types).await?;
                self.statements.lock().insert(sql, stmt);
                prepared += 1;
            }
        }
        Ok(prepared)
    }

    /// The count of cancelled waits for the standby so far: a write compares it before
    /// and after its COMMIT.
    pub fn sync_rep_cancels(&self) -> u64 {
        self.sync_rep_cancels.load(Ordering::Acquire)
    }

    /// Whether the connection can take another call: its I/O half has not ended, after
    /// reading what the server sent while it was idle (a server that closed it, a
    /// backend that was terminated, shows here, before a call is sent on it).
    async fn still_open(&mut self) -> bool {
        std::future::poll_fn(|cx| {
            let driver = self.driver.get_mut();
            drive(driver, &self.sync_rep_cancels, cx);
            Poll::Ready(driver.is_some() && !self.client.is_closed())
        })
        .await
    }
}

/// Runs `call` with the connection `conn`, polling the connection's I/O half in the same
/// task: the thread that awaits the call (the caller's own, for the blocking API) writes
/// its requests and reads the answers itself, so a round trip wakes no other thread but
/// the runtime's I/O driver's. (Spawning the I/O half as a task of its own would hand
/// every request and every answer from one thread to another.)
pub(super) async fn driven<T, F>(mut conn: Conn, call: impl FnOnce(Conn) -> F) -> (Conn, T)
where
    F: Future<Output = (Conn, T)>,
{
    let mut driver = conn.driver.get_mut().take();
    let cancels = conn.sync_rep_cancels.clone();
    let mut call = std::pin::pin!(call(conn));
    let (mut conn, out) = std::future::poll_fn(|cx| {
        drive(&mut driver, &cancels, cx);
        let out = call.as_mut().poll(cx);
        if out.is_pending() {
            // Sends what the call just queued; an answer already read wakes this task.
            drive(&mut driver, &cancels, cx);
        }
        out
    })
    .await;
    *conn.driver.get_mut() = driver;
    (conn, out)
}

/// Polls a connection's I/O half until it waits for the socket; drops it once it ended,
/// which fails the client's calls in flight (they see the connection closed).
fn drive(driver: &mut Option<Driver>, cancels: &AtomicU64, cx: &mut Context<'_>) {
    let Some(connection) = driver else {
        return;
    };
    loop {
        match connection.poll_message(cx) {
            Poll::Pending => return,
            Poll::Ready(Some(Ok(AsyncMessage::Notice(n)))) => {
                if is_sync_rep_cancel(&n) {
                    cancels.fetch_add(1, Ordering::Release);
                }
                tracing::debug!("PostgreSQL notice: {}", n.message());
            }
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!("PostgreSQL connection ended: {e}");
                *driver = None;
                return;
            }
            Poll::Ready(None) => {
                *driver = None;
                return;
            }
        }
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// Whether a notice is PostgreSQL's warning that a COMMIT's wait for a synchronous standby
/// was cancelled (`pg_cancel_backend`, a cancel request): the COMMIT then reports success
/// though the transaction committed on the primary only. The warning has no SQLSTATE of its
/// own (01000), so it is told by its text, which the server's `lc_messages` must leave in
/// English.
fn is_sync_rep_cancel(notice: &tokio_postgres::error::DbError) -> bool {
    notice
        .message()
        .starts_with("canceling wait for synchronous replication")
}

/// What every clone of a `PgStore` shares.
pub(super) struct Shared {
    pub options: PgOptions,
    /// Opened by `PgStore::open_read_only`: every write is refused with `Error::ReadOnly`
    /// before it reaches the server, and the sessions are read-only on the server too.
    pub read_only: bool,
    config: Config,
    /// Idle connections and when each was given back, most recently used last.
    idle: Mutex<Vec<(Conn, Instant)>>,
    /// Writes that returned `Ok` on this handle: every `PRUNE_EVERY`th prunes `writes`.
    pub writes_done: std::sync::atomic::AtomicU64,
    /// The handle's hints of its tasks' rows, for commits (`hint.rs`).
    pub hints: Hints,
    /// Round trips the commit path made on this handle: statements prepared, calls of
    /// the commit function, folds of a state to snapshot (`PgStore::commit_round_trips`).
    pub commit_round_trips: AtomicU64,
    /// Sessions this handle opened so far (`PgStore::pool_counts`).
    sessions_opened: AtomicU64,
    /// How the handle's sessions compress the values they write (`toast.rs`).
    pub toast: Toast,
    /// The handle's runtime, whose I/O driver and timers serve the connections: the
    /// blocking API blocks on it from the caller's thread (`block_on`), the async API
    /// spawns its calls onto it (`spawn`). Through this handle to it, so that `rt` can be
    /// taken out in `drop`.
    handle: tokio::runtime::Handle,
    /// The runtime itself, owned here; `None` only while `Shared` is dropped.
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The idle connections (sockets registered with the runtime's I/O driver) close
        // before the runtime shuts down.
        self.idle.get_mut().clear();
        let Some(rt) = self.rt.take() else {
            return;
        };
        // Dropping a runtime waits for its threads, which tokio refuses (a panic) inside
        // any runtime's async context; and the last handle can be dropped there: in a
        // caller's task, or in a call spawned onto this very runtime that outlived its
        // caller (a dropped future of `AsyncPgStore`). There the runtime is shut down
        // without waiting: its threads end on their own.
        match tokio::runtime::Handle::try_current() {
            Ok(_) => rt.shutdown_background(),
            Err(_) => drop(rt),
        }
    }
}

impl Shared {
    pub fn new(url: &str, options: PgOptions, read_only: bool) -> Result<Self> {
        let mut config = Config::from_str(url).map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot parse the PostgreSQL address {url:?}: {e}; give a postgresql:// URL or key=value words"
            ))
        })?;
        // A client that stopped mid-transaction (frozen, partitioned) must not hold its
        // task's row locks for ever: the server ends such a session after twice the deadline.
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the PostgreSQL address {url:?} names no host: add one (postgres://user@host/db), \
                 or a socket directory (host=/run/postgresql, or ?host=/run/postgresql in a URL)"
            )));
        }
        let idle_ms = options.deadline.as_millis().saturating_mul(2).max(1000);
        // A read-only handle's sessions refuse writes on the server too (SQLSTATE 25006).
        let read_only_opt = if read_only {
            " -c default_transaction_read_only=on"
        } else {
            ""
        };
        config
            .options(format!(
                "-c search_path={} -c idle_in_transaction_session_timeout={idle_ms}{read_only_opt}",
                options.schema
            ))
            .application_name("agentwal")
            .connect_timeout(options.deadline);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentwal-pg")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::io("starting the PostgreSQL client's runtime", e))?;
        Ok(Shared {
            options,
            read_only,
            config,
            idle: Mutex::new(Vec::new()),
            writes_done: std::sync::atomic::AtomicU64::new(0),
            hints: Hints::default(),
            commit_round_trips: AtomicU64::new(0),
            sessions_opened: AtomicU64::new(0),
            toast: Toast::default(),
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
    }

    /// Runs `f` to completion on the caller's thread, with the handle's runtime driving
    /// the connections (a multi-thread runtime's workers drive its I/O and timers, so
    /// blocking through its `Handle` is as good as through the `Runtime`).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// Runs `f` as a task of the handle's runtime: awaiting the `JoinHandle` holds no
    /// thread, from any caller's runtime (or from this one).
    #[cfg(feature = "tokio")]
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(f)
    }

    /// A connection: an idle one that is still open, or a new one.
    pub async fn get(&self) -> Attempt<Conn> {
        loop {
            let Some((mut client, _)) = self.idle.lock().pop() else {
                break;
            };
            if client.still_open().await {
                return Ok(client);
            }
        }
        let (client, connection) = self.config.connect(NoTls).await?;
        self.sessions_opened.fetch_add(1, Ordering::Relaxed);
        let conn = Conn {
            client,
            driver: Mutex::new(Some(connection)),
            sync_rep_cancels: Arc::new(AtomicU64::new(0)),
            statements: Mutex::new(HashMap::new()),
            ran_once: Mutex::new(HashSet::new()),
        };
        if !self.toast.is_lz4() {
            return Ok(conn);
        }
        let (conn, prepared) = driven(conn, |c| async move {
            let out = self.toast.prepare(&c).await;
            (c, out)
        })
        .await;
        prepared.map(|()| conn)
    }

    /// Gives a connection back after a call that ended cleanly (its transaction committed
    /// or rolled back); one that failed is dropped instead, and with it its session.
    pub fn put(&self, mut client: Conn) {
        if client.driver.get_mut().is_none() || client.is_closed() {
            return;
        }
        let now = Instant::now();
        let (stale, refused) = {
            let mut idle = self.idle.lock();
            // Oldest first: those unused for `pool_idle_time_max` close.
            let fresh_from = idle
                .iter()
                .position(|(_, at)| now.duration_since(*at) < self.options.pool_idle_time_max)
                .unwrap_or(idle.len());
            let stale: Vec<_> = idle.drain(..fresh_from).collect();
            if idle.len() < self.options.pool_idle_max {
                idle.push((client, now));
                (stale, None)
            } else {
                (stale, Some(client))
            }
        };
        // Closed outside the lock.
        drop((stale, refused));
    }

    /// How many idle connections the pool holds, and how many sessions this handle
    /// opened so far (`PgStore::pool_counts`).
    pub fn pool_counts(&self) -> (usize, u64) {
        let idle = self.idle.lock().len();
        (idle, self.sessions_opened.load(Ordering::Relaxed))
    }

    /// `Error::ReadOnly` on a read-only handle: the first check of every call that writes.
    pub fn writable(&self) -> Result<()> {
        match self.read_only {
            true => Err(Error::ReadOnly),
            false => Ok(()),
        }
    }

    /// The instant a call starting now must end by.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.options.deadline
    }

    /// Runs a call that writes nothing a caller could lose (a read, a lease operation, a
    /// migration): retried on fresh connections after connection failures until the
    /// deadline; then `Error::Postgres`.
    pub fn run_read<T>(
        &self,
        context: &str,
        f: impl AsyncFn(&mut Conn) -> Attempt<T>,
    ) -> Result<T> {
        let f = &f;
        self.block_on(self.run_read_async(context, move |mut c| async move {
            let out = f(&mut c).await;
            (c, out)
        }))
    }

    /// [`run_read`](Self::run_read) as a future, `Send` when `f`'s futures are (write `f`
    /// with [`attempt!`]); the deadline counts from its first poll.
    pub async fn run_read_async<T, F>(&self, context: &str, f: impl Fn(Conn) -> F) -> Result<T>
    where
        F: Future<Output = (Conn, Attempt<T>)>,
    {
        let deadline = self.deadline();
        let mut last = String::from("no attempt finished");
        loop {
            let attempt = async {
                let (client, out) = driven(self.get().await?, &f).await;
                if !matches!(out, Err(Fail::Db(_))) {
                    self.put(client);
                }
                out
            };
            match timeout_at(deadline, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(Fail::Api(e))) => return Err(e),
                Ok(Err(Fail::Db(e))) if definite(&e) => return Err(pg_error(context, &e)),
                Ok(Err(Fail::Db(e))) => last = e.to_string(),
                Err(_) => return Err(deadline_error(context, &self.options, &last)),
            }
            if timeout_at(deadline, sleep(RETRY_PAUSE)).await.is_err() {
                return Err(deadline_error(context, &self.options, &last));
            }
        }
    }
}

/// One attempt's body for [`Shared::run_read_async`] (`attempt!(|c| body)`) or
/// [`Shared::run_write_async`] (`attempt!(|c, id| body)`): `body` runs as an async block
/// (`return` and `?` end the attempt) on `c: &mut Conn` and, for a write, `id: &str`,
/// the attempt's write id; the connection goes back to the caller with the outcome.
///
/// Not an async closure (`AsyncFn(&mut Conn)`, what the blocking `run_read` takes): the
/// future of one borrows the closure, and rustc cannot prove a future that holds such a
/// borrow across an await `Send` ("implementation of `Send` is not general enough"), so
/// `AsyncPgStore` could not spawn it. Here the connection moves in and out instead, and
/// each attempt copies what the body captures: only `Copy` values (references, mostly).
macro_rules! attempt {
    (|$c:ident| $body:expr) => {
        move |mut conn: $crate::postgres::conn::Conn| async move {
            let out: $crate::postgres::conn::Attempt<_> = async {
                let $c = &mut conn;
                $body
            }
            .await;
            (conn, out)
        }
    };
    (|$c:ident, $id:ident| $body:expr) => {
        move |mut conn: $crate::postgres::conn::Conn, id: String| async move {
            let out: $crate::postgres::conn::Attempt<_> = async {
                let $c = &mut conn;
                let $id = id.as_str();
                $body
            }
            .await;
            (conn, out)
        }
    };
}
pub(super) use attempt;

/// The error of a call whose deadline passed with nothing written.
pub(super) fn deadline_error(context: &str, options: &PgOptions, last: &str) -> Error {
    Error::Postgres {
        context: context.to_string(),
        message: format!(
            "no answer within the deadline of {} ms (last failure: {last})",
            options.deadline.as_millis()
        ),
    }
}
