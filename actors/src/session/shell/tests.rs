//! Behaviour tests of file-backed shell sessions against real `bash` and `sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::*;

fn sessions(tmp: &tempfile::TempDir) -> ShellSessions {
    ShellSessions::new(
        ShellConfig::new(tmp.path().join(".sessions")).with_secret_vars(["AGENT_KEY".to_string()]),
    )
}

fn start(store: &ShellSessions, shell: &str, work_dir: &Path) -> ShellSession {
    let env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap()),
        ("HOME".into(), "/root".into()),
        ("DELTA_API_KEY".into(), "sk-do-not-store".into()),
        ("AGENT_KEY".into(), "ak-do-not-store".into()),
        ("KEEP_ME".into(), "kept".into()),
    ];
    let options = StartOptions {
        shell: Some(shell.to_string()),
        work_dir: work_dir.to_path_buf(),
        env,
    };
    let metadata = store.start(&options).unwrap();
    store.open(&metadata.session_id).unwrap()
}

async fn run(session: &ShellSession, command: &str) -> ExecOutcome {
    session.exec(command, ExecOptions::default()).await.unwrap()
}

#[tokio::test]
async fn bash_state_persists_between_execs() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let first = run(
        &session,
        "cd /tmp\nexport A=1\nB=2\ngreet() { echo \"hi $1\"; }\nalias ll='echo aliased'\nset -o pipefail\nshopt -s nullglob\ndeclare -A M=([k]=v)",
    )
    .await;
    assert_eq!(first.exit_code, 0, "{first:?}");
    let second = run(
        &session,
        "pwd; echo \"$A $B ${M[k]} $KEEP_ME\"; greet you; ll; [[ -o pipefail ]] && echo pf; shopt -q nullglob && echo ng; env | grep -c '^A=1$'",
    )
    .await;
    assert_eq!(
        second.stdout, "/tmp\n1 2 v kept\nhi you\naliased\npf\nng\n1\n",
        "{second:?}"
    );
    assert_eq!(session.metadata().unwrap().work_dir, PathBuf::from("/tmp"));
    assert_eq!(session.metadata().unwrap().execution_count, 2);
}

#[tokio::test]
async fn exit_inside_the_command_still_saves_state_and_reports_its_code() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let out = run(&session, "X=after_exit; cd /; exit 3").await;
    assert_eq!(out.exit_code, 3);
    let out = run(&session, "echo \"$X $PWD\"").await;
    assert_eq!(out.stdout, "after_exit /\n");
    let out = run(&session, "set -e; Y=1; false; Y=2").await;
    assert_eq!(out.exit_code, 1);
    let out = run(&session, "set +e; echo $Y").await;
    assert_eq!(out.stdout, "1\n");
}

#[tokio::test]
async fn heredocs_and_hostile_text_run_verbatim() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let hostile =
        "EOF\nDELTA_CMD_EOF\n'\"; echo escaped; \"'\n$(echo subst) `echo tick`\n__delta_save";
    let command = format!("cat <<'EOF2'\n{hostile}\nEOF2\nfor i in 1 2; do\n  echo \"n$i\"\ndone");
    let out = run(&session, &command).await;
    assert_eq!(out.stdout, format!("{hostile}\nn1\nn2\n"));
    assert_eq!(out.stderr, "");
}

#[tokio::test]
async fn secrets_are_never_written_into_state() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let out = run(
        &session,
        "export DELTA_API_KEY=sk-set-inside; AGENT_KEY=x; echo ${DELTA_API_KEY-unset}",
    )
    .await;
    assert_eq!(out.stdout, "sk-set-inside\n");
    let out = run(&session, "echo ${DELTA_API_KEY-unset} ${AGENT_KEY-unset}").await;
    assert_eq!(out.stdout, "unset unset\n");
    for entry in fs::read_dir(session.dir()).unwrap() {
        let path = entry.unwrap().path();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
        if path.file_name().unwrap() != "history.log" && path.file_name().unwrap() != "command.sh" {
            let text = fs::read_to_string(&path).unwrap();
            assert!(!text.contains("sk-"), "{} leaks a key", path.display());
            assert!(
                !text.contains("ak-do-not-store"),
                "{} leaks a key",
                path.display()
            );
        }
    }
    let mode = fs::metadata(session.dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[tokio::test]
async fn a_timeout_kills_the_group_returns_partial_output_and_keeps_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    run(&session, "V=before").await;
    let options = ExecOptions {
        timeout: Duration::from_millis(300),
        ..ExecOptions::default()
    };
    let out = session
        .exec("echo partial; V=changed; sleep 30 & sleep 30", options)
        .await
        .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, TIMEOUT_EXIT_CODE);
    assert!(out.stdout.starts_with("partial"), "{out:?}");
    assert!(out.execution_time_ms < 5_000);
    let out = run(&session, "echo $V").await;
    assert_eq!(out.stdout, "before\n");
}

#[tokio::test]
async fn output_beyond_the_cap_is_cut_and_kept_in_full_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let options = ExecOptions {
        output_cap: 10,
        ..ExecOptions::default()
    };
    let out = session.exec("printf '%050d' 0", options).await.unwrap();
    assert!(out.truncated);
    assert_eq!(out.stdout.len(), 10);
    let full = fs::read_to_string(out.stdout_file.unwrap()).unwrap();
    assert_eq!(full.len(), 50);
}

#[tokio::test]
async fn posix_sh_sessions_keep_cwd_and_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "sh", tmp.path());
    run(&session, "cd /tmp; export A=1; B='two\nlines'; set -u").await;
    let out = run(
        &session,
        "pwd; echo \"$A $B\"; env | grep -c '^A=1$'; case $- in *u*) echo nounset;; esac",
    )
    .await;
    assert_eq!(out.stdout, "/tmp\n1 two\nlines\n1\nnounset\n", "{out:?}");
}

#[tokio::test]
async fn terminated_sessions_refuse_execs_and_cleanup_removes_only_them() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let ended = start(&store, "bash", tmp.path());
    let active = start(&store, "bash", tmp.path());
    ended.end().await.unwrap();
    let err = ended
        .exec("true", ExecOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Terminated { .. }), "{err}");
    fs::create_dir_all(tmp.path().join(".sessions/sess_0000aaaa")).unwrap();
    let report = store.cleanup().unwrap();
    assert_eq!(report.cleaned, vec![ended.id().to_string()]);
    assert!(report.remaining.contains(&active.id().to_string()));
    assert!(tmp.path().join(".sessions/sess_0000aaaa").exists());
    assert!(!ended.dir().exists());
    assert_eq!(store.list().unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_sessions_and_repls_give_helpful_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let err = store.open("sess_abcdef").unwrap_err().to_string();
    assert!(err.contains("not found") && err.contains("list"), "{err}");
    let err = store.open("../etc").unwrap_err();
    assert!(matches!(err, SessionError::InvalidId { .. }));
    let options = StartOptions {
        shell: Some("python3".into()),
        work_dir: tmp.path().to_path_buf(),
        env: vec![],
    };
    let err = store.start(&options).unwrap_err().to_string();
    assert!(err.contains("delta-sessions-pty"), "{err}");
}

#[tokio::test]
async fn a_vanished_working_directory_falls_back_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let gone = tmp.path().join("gone");
    fs::create_dir(&gone).unwrap();
    run(&session, &format!("cd '{}'", gone.display())).await;
    fs::remove_dir(&gone).unwrap();
    let out = run(&session, "pwd").await;
    assert_eq!(out.stdout, "/\n");
    assert!(out.stderr.contains("no longer exists"), "{out:?}");
}

#[tokio::test]
async fn a_background_job_of_an_earlier_exec_cannot_corrupt_later_output() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    run(
        &session,
        "(while :; do echo bg; sleep 0.02; done) & echo $! > bg.pid; printf '%0100d' 0",
    )
    .await;
    let out = run(&session, "sleep 0.1; echo mine").await;
    run(&session, "kill $(cat bg.pid)").await;
    assert_eq!(out.stdout, "mine\n");
}

#[tokio::test]
async fn odd_user_options_do_not_break_the_state_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let store = sessions(&tmp);
    let session = start(&store, "bash", tmp.path());
    let out = run(
        &session,
        "shopt -s nocasematch; set -u; set -o noclobber; IFS=,; bash_like=kept; uid=mine",
    )
    .await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let out = run(
        &session,
        "echo \"$bash_like $uid\"; shopt -q nocasematch && echo ncm; [[ -o nounset ]] && echo nu",
    )
    .await;
    assert_eq!(out.stdout, "kept mine\nncm\nnu\n", "{out:?}");
}
