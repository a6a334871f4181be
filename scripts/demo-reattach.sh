#!/usr/bin/env bash
# make demo-reattach: tether's reattach on one machine. It starts `tether dev`
# (private PostgreSQL, ECS emulator as a process of its own), submits an ECS
# job whose task runs about 20 s, kills the agent with SIGKILL mid-job,
# starts it again and shows the same task (same ARN) finishing, the job
# succeeded and every line of its output once. Needs only Go (to build) and
# the PostgreSQL server package; it uses its own data directory and port, so
# a `make run` may keep running beside it.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin}
TETHER=$BIN/tether
DATA=${DEMO_DATA_DIR:-.tether/demo}
ADDR=${DEMO_LISTEN:-127.0.0.1:9191}
SERVER=http://$ADDR
LINES=${DEMO_LINES:-20}
AGENT_LOG=$DATA/run/agent.log

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
fail() { printf '\ndemo-reattach: %s\n(agent log: %s)\n' "$*" "$AGENT_LOG" >&2; exit 1; }
t() { "$TETHER" --server "$SERVER" "$@"; }

[ -x "$TETHER" ] || fail "$TETHER not found: run make build (make demo-reattach does)"
[ -x "$BIN/tether-plugin-ecs" ] || fail "$BIN/tether-plugin-ecs not found: run make build"

# Whatever an interrupted earlier demo left running.
"$TETHER" dev stop --data-dir "$DATA" >/dev/null 2>&1 || true
trap '"$TETHER" dev stop --data-dir "$DATA" >/dev/null 2>&1 || true' EXIT
mkdir -p "$DATA/run"
: >"$AGENT_LOG"

agent_pid=
start_agent() {
	"$TETHER" dev --data-dir "$DATA" --listen "$ADDR" --no-demo >>"$AGENT_LOG" 2>&1 &
	agent_pid=$!
	for _ in $(seq 1 600); do # up to 60 s: the first start runs initdb
		if t agents >/dev/null 2>&1; then
			echo "agent pid $agent_pid serving at $SERVER (log: $AGENT_LOG)"
			return
		fi
		kill -0 "$agent_pid" 2>/dev/null || fail "tether dev exited during start-up"
		sleep 0.1
	done
	fail "tether dev did not answer at $SERVER within 60 s"
}

# task_arns prints the distinct ECS task ARNs the job's log names.
task_arns() { { t logs "$1" 2>/dev/null || true; } | grep -o 'arn:aws:ecs:[^ )]*:task/[^ ),]*' | sort -u || true; }

step "1. start tether dev: private PostgreSQL, local ECS emulator (its own process), one agent"
start_agent
grep -E 'emulator at|PostgreSQL' "$AGENT_LOG" | sed 's/^/   /' || true

step "2. submit an ECS job whose task prints $LINES lines, one a second"
ctx='{"container_overrides":[{"name":"demo","environment":{"DEMO_LINES":"'$LINES'","DEMO_INTERVAL":"1"}}]}'
job=$(t -o json submit ecs-demo --context "$ctx" | sed -n 's/^ *"id": *"\([^"]*\)".*/\1/p' | head -1)
[ -n "$job" ] || fail "could not read the job id from submit's output"
echo "job $job"
for _ in $(seq 1 300); do
	t logs "$job" 2>/dev/null | grep -q 'ecs task line 5 ' && break
	sleep 0.1
done
t logs "$job" 2>/dev/null | grep -q 'ecs task line 5 ' || fail "the task printed no 5th line within 30 s"
arn_before=$(task_arns "$job")
[ -n "$arn_before" ] || fail "the job's log names no task ARN"
echo "the task is running: $arn_before"
t logs "$job" | tail -n 3 | sed 's/^/   /'

step "3. kill -9 the agent (pid $agent_pid) mid-job: no drain, no goodbye"
kill -9 "$agent_pid"
wait "$agent_pid" 2>/dev/null || true
echo "agent gone; the emulator and PostgreSQL keep running, and so does the task"

step "4. start the agent again: it reuses the emulator and the database, and reattaches"
restart_from=$(wc -l <"$AGENT_LOG")
start_agent
tail -n +"$((restart_from + 1))" "$AGENT_LOG" | grep -E 'reusing|previous process' | sed 's/^/   /' || true

step "5. follow the job to its end: every line once, then the outcome"
t logs -f "$job" || echo "(tether logs -f exited with $?)"
status=
for _ in $(seq 1 600); do
	status=$({ t -o json get "$job" || true; } | sed -n 's/^ *"status": *"\([^"]*\)".*/\1/p' | head -1)
	case $status in succeeded | failed | canceled) break ;; esac
	sleep 0.1
done

step "6. the result"
arns=$(task_arns "$job")
echo "task ARN before the kill: $arn_before"
echo "task ARN(s) in the log:   $(echo "$arns" | tr '\n' ' ')"
[ "$arns" = "$arn_before" ] || fail "the job ran another task: a relaunch, not a reattach"
got=$(t logs "$job" | grep -c 'ecs task line ' || true)
[ "$got" = "$LINES" ] || fail "the log holds $got task lines, want $LINES (each once)"
[ "$status" = succeeded ] || fail "job $job is ${status:-unknown}, want succeeded"
echo "job $job succeeded; the same task finished after the agent restart, and its $LINES lines are in the log once each"
t logs "$job" | grep -E 'adopted|resuming' | sed 's/^/   /' || true

step "done: stopping the demo stack (tether dev stop --data-dir $DATA)"
