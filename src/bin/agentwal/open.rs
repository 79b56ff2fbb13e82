//! Where a command reads: a store directory, opened read-only (again while a live writer's
//! compaction keeps changing it under the scan), or a PostgreSQL database (`postgres://`
//! URL or `--pg`), opened read-only, which needs the `postgres` feature.

use std::path::{Path, PathBuf};

use agentwal::{AgentState, CallInfo, Error, Store, TaskInfo, TaskStore};

use crate::Failure;

/// Read-only opens tried when a store keeps changing under the scan (a writer compacting
/// hard): each open already rescans several times before it reports `StoreChanged`.
const OPEN_ATTEMPTS: usize = 5;

/// Runs a read-only `open` again while it reports that the store changed under it, so a
/// read command beside a live, compacting writer answers from a consistent view.
pub fn reopening<T>(mut open: impl FnMut() -> agentwal::Result<T>) -> agentwal::Result<T> {
    let mut attempt = 1;
    loop {
        match open() {
            Err(Error::StoreChanged { .. }) if attempt < OPEN_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

/// Opens the store in `dir` read-only, as [`AgentState`].
pub fn open(dir: &Path) -> Result<Store, Failure> {
    Ok(reopening(|| Store::<AgentState>::open_read_only(dir))?)
}

/// The PostgreSQL options every command that can read a database takes.
#[derive(clap::Args, Clone, Debug)]
pub struct PgArgs {
    /// Read the PostgreSQL store at this address instead of STORE: a postgres:// URL
    /// (`postgres://user@/db?host=/run/postgresql` for a unix socket) or key=value words
    /// (`host=/run/postgresql user=postgres dbname=agents`). Needs a build with
    /// `--features postgres`.
    #[arg(long, value_name = "URL")]
    pub pg: Option<String>,
    /// PostgreSQL only: the schema holding agentwal's tables [default: agentwal].
    #[arg(long, value_name = "NAME")]
    pub schema: Option<String>,
    /// PostgreSQL only: the deadline of each call to the server, in milliseconds
    /// [default: 10000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline_ms: Option<u64>,
}

/// Where a command works.
pub enum Target {
    /// A store directory.
    Dir(PathBuf),
    /// A PostgreSQL address, and the options for it.
    Pg(String, PgArgs),
}

/// Whether `s` is a PostgreSQL URL rather than a directory.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// `url` with any password replaced, for messages.
pub fn redact(url: &str) -> String {
    let Some(rest) = url.split_once("://").map(|(_, r)| r) else {
        return url.to_string();
    };
    let Some((creds, _)) = rest.split_once('@') else {
        return url.to_string();
    };
    match creds.split_once(':') {
        Some((_, password)) => url.replacen(&format!(":{password}@"), ":***@", 1),
        None => url.to_string(),
    }
}

impl Target {
    /// The target of a read command from its positionals: STORE (a directory or a URL),
    /// or `--pg URL` and no STORE; `task` is the positional after STORE, which with `--pg`
    /// arrives in STORE's place.
    pub fn resolve(
        store: Option<String>,
        task: Option<String>,
        pg: PgArgs,
        wants_task: bool,
    ) -> Result<(Target, Option<String>), Failure> {
        let (target, task) = match (pg.pg.clone(), store, task) {
            (Some(_), Some(_), Some(_)) => {
                return Err(Failure::Usage(
                    "give the store once: a directory or URL as STORE, or --pg URL".into(),
                ));
            }
            (Some(_), Some(s), None) if !wants_task => {
                return Err(Failure::Usage(format!(
                    "give the store once: a directory or URL as STORE, or --pg URL (also got {s:?})"
                )));
            }
            (Some(url), first, None) => (Target::Pg(url, pg), first),
            (None, Some(s), task) if is_url(&s) => (Target::Pg(s, pg), task),
            (None, Some(s), task) => {
                if pg.schema.is_some() || pg.deadline_ms.is_some() {
                    return Err(Failure::Usage(
                        "--schema and --deadline-ms apply to a PostgreSQL store only".into(),
                    ));
                }
                (Target::Dir(PathBuf::from(s)), task)
            }
            (None, None, _) | (Some(_), None, Some(_)) => {
                return Err(Failure::Usage(
                    "no store given: a store directory, a postgres:// URL, or --pg URL".into(),
                ));
            }
        };
        if wants_task && task.is_none() {
            return Err(Failure::Usage("no task given: TASK is required".into()));
        }
        Ok((target, task))
    }
}

/// A store opened read-only, on either backend.
pub enum Opened {
    /// A local store.
    Local(Store),
    /// A PostgreSQL store, and what to call it in messages.
    #[cfg(feature = "postgres")]
    Pg(agentwal::postgres::PgStore, String),
}

impl Opened {
    /// Opens `target` read-only.
    pub fn open(target: &Target) -> Result<Opened, Failure> {
        match target {
            Target::Dir(dir) => Ok(Opened::Local(open(dir)?)),
            Target::Pg(url, args) => open_pg(url, args),
        }
    }

    /// The store's API.
    pub fn api(&self) -> &dyn TaskStore<AgentState> {
        match self {
            Opened::Local(s) => s,
            #[cfg(feature = "postgres")]
            Opened::Pg(s, _) => s,
        }
    }

    /// What to call the store in messages.
    pub fn name(&self) -> String {
        match self {
            Opened::Local(s) => s.dir().display().to_string(),
            #[cfg(feature = "postgres")]
            Opened::Pg(_, name) => name.clone(),
        }
    }

    /// A summary of every task.
    pub fn task_infos(&self) -> agentwal::Result<Vec<TaskInfo>> {
        match self {
            Opened::Local(s) => s.task_infos(),
            #[cfg(feature = "postgres")]
            Opened::Pg(s, _) => s.task_infos(),
        }
    }

    /// Every call of a task's journal.
    pub fn calls(&self, task: &str) -> agentwal::Result<Vec<CallInfo>> {
        match self {
            Opened::Local(s) => s.calls(task),
            #[cfg(feature = "postgres")]
            Opened::Pg(s, _) => s.calls(task),
        }
    }
}

/// The PostgreSQL options of `args`.
#[cfg(feature = "postgres")]
pub fn pg_options(args: &PgArgs) -> agentwal::postgres::PgOptions {
    let mut options = agentwal::postgres::PgOptions::default();
    if let Some(schema) = &args.schema {
        options.schema = schema.clone();
    }
    if let Some(ms) = args.deadline_ms {
        options.deadline = std::time::Duration::from_millis(ms);
    }
    options
}

#[cfg(feature = "postgres")]
fn open_pg(url: &str, args: &PgArgs) -> Result<Opened, Failure> {
    let options = pg_options(args);
    let name = format!("schema {:?} of {}", options.schema, redact(url));
    let store = agentwal::postgres::PgStore::open_read_only(url, options)?;
    Ok(Opened::Pg(store, name))
}

#[cfg(not(feature = "postgres"))]
fn open_pg(url: &str, _: &PgArgs) -> Result<Opened, Failure> {
    Err(no_postgres(url))
}

/// The error for a PostgreSQL address given to a build without the backend.
#[cfg(not(feature = "postgres"))]
pub fn no_postgres(url: &str) -> Failure {
    Failure::Usage(format!(
        "{} is a PostgreSQL address, and this agentwal was built without PostgreSQL support: \
         build it with `--features postgres` (cargo build --features postgres, or cargo install \
         agentwal --features postgres)",
        redact(url)
    ))
}
