#!/usr/bin/env python3
"""Measures what each context compaction strategy and setting costs on issue 32's 30-page
agent (one tool printing a 1.8 KB page per call, `max_tokens: 200`) on the scripted model,
whose `prompt_tokens` is a quarter of a request's characters: every figure is exact and the
same on every machine.

    scripts/context-strategies.py                   # uses target/release/delta, else target/debug/delta
    DELTA_BIN=/path/to/delta scripts/context-strategies.py

For each setting it runs the agent in a 4,096-token window (`llm.context_window: 4096`) for 31
calls (30 pages, then the answer) and prints: the prompt tokens of all calls, their share of
the 224,087 of a run without a window, the largest request, the compactions, and the tokens
of the summary calls (summarize strategies; a scripted summarizer answers with 80 words).
The summarize strategies read pages with a tool that keeps its own page count, since the
scripted model replays its steps from the turns it is sent.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "context", "thirty-pages")
TASK = "Read the book and summarize it."
TODAY = 224_087


def delta_binary():
    if os.environ.get("DELTA_BIN"):
        return os.environ["DELTA_BIN"]
    for profile in ("release", "debug"):
        path = os.path.join(ROOT, "target", profile, "delta")
        if os.path.exists(path):
            return path
    sys.exit("context-strategies: build delta first (cargo build --release)")


def agent(root, window, compaction, counting_tool):
    folder = os.path.join(root, "agent")
    os.makedirs(folder)
    for name in ("page.sh", "next_page.sh", "book.txt", "system_prompt.md"):
        shutil.copy(os.path.join(FIXTURE, name), folder)
    tool = (
        "  - name: next_page\n    description: Read the next page of the book\n"
        "    exec: \"sh ${AGENT_HOME}/next_page.sh\"\n"
        if counting_tool
        else "  - name: read_page\n    description: Read one page of the book\n"
        "    exec: \"sh ${AGENT_HOME}/page.sh ${page}\"\n    parameters:\n"
        "      - name: page\n        description: The page number, 1 to 30\n"
    )
    window_line = f"  context_window: {window}\n" if window else ""
    with open(os.path.join(folder, "agent.yaml"), "w") as f:
        f.write(
            f"name: reader\nllm:\n  model: scripted\n  max_tokens: 200\n{window_line}"
            f"max_iterations: 31\nask_human: false\ntools:\n{tool}"
        )
    with open(os.path.join(folder, "context.yaml"), "w") as f:
        f.write(
            "sources:\n  - type: file\n    id: system_prompt\n"
            "    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n"
            f"    id: conversation_history\n    compaction: {compaction}\n"
        )
    return folder


def script(root, counting_tool):
    if counting_tool:
        steps = [{"tool": "next_page"} for _ in range(30)]
    else:
        steps = [{"tool": "read_page", "args": {"page": str(p)}} for p in range(1, 31)]
    steps.append({"answer": "The book is about a fox and a dog."})
    summary = "SUMMARY: " + " ".join(["the fox jumps over the lazy dog"] * 11)
    doc = {
        "default_latency": 0,
        "rules": [
            {"model": "summarizer", "steps": [{"answer": summary}]},
            {"steps": steps},
        ],
    }
    path = os.path.join(root, "script.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def measure(delta, label, window, compaction, counting_tool=False):
    root = tempfile.mkdtemp(prefix="delta-context-")
    try:
        folder = agent(root, window, compaction, counting_tool)
        mock = subprocess.Popen(
            [delta, "mock-llm", "--port", "0", "--script", script(root, counting_tool)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        url = mock.stdout.readline().strip()
        work = os.path.join(root, "ws")
        env = {"PATH": os.environ["PATH"], "HOME": root, "DELTA_BASE_URL": url, "DELTA_API_KEY": "x"}
        run = subprocess.run(
            [delta, "run", "--agent", folder, "-w", work, "--run-id", "r", "-m", TASK,
             "--format", "json", "-y"],
            env=env, capture_output=True, text=True, timeout=600,
        )
        mock.terminate()
        mock.wait()
        result = json.loads(run.stdout)
        calls, summaries = [], 0
        for path in sorted(glob.glob(os.path.join(work, ".delta", "r", "io", "invocations", "*.json"))):
            with open(path) as f:
                record = json.load(f)
            if "error" in record or "attempt" in record:
                continue
            tokens = record["response"]["usage"]["prompt_tokens"]
            if record.get("purpose") == "context_summary":
                summaries += tokens + record["response"]["usage"]["completion_tokens"]
            else:
                calls.append(tokens)
        total = sum(calls)
        print(
            f"| {label} | {len(calls)} | {total:,} | {100 * total / TODAY:.1f} % | {max(calls):,} "
            f"| {result['metrics'].get('compactions', 0)} | {summaries:,} |"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    delta = delta_binary()
    print("| setting (`compaction:` of the journal) | calls | prompt tokens | of 224,087 | largest request | compactions | summary calls' tokens |")
    print("|---|---|---|---|---|---|---|")
    measure(delta, "no window (today)", None, "mask")
    measure(delta, "`mask` (default: keep_last 2, compact_to 50%)", 4096, "mask")
    for share in (30, 70, 90):
        measure(delta, f"`mask`, compact_to {share}%", 4096, f"{{strategy: mask, compact_to: {share}%}}")
    for keep in (1, 4):
        measure(delta, f"`mask`, keep_last {keep}", 4096, f"{{strategy: mask, keep_last: {keep}}}")
    for strategy in ("summarize", "mask_then_summarize"):
        measure(
            delta,
            f"`{strategy}` (summary_model answers 80 words)",
            4096,
            f"{{strategy: {strategy}, summary_model: summarizer, summary_max_tokens: 200}}",
            counting_tool=True,
        )
    measure(delta, "`off` (window known, never compacted)", 4096, "off")


if __name__ == "__main__":
    main()
