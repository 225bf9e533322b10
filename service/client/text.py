"""attnserve-client text: running text -> its pronunciation, over TransduceText.

    attnserve-client text "Dr. Smith paid $5.50 on the 14th."       # each token, what it is read as, each word
    attnserve-client text --file book.txt > book.tsv                 # one text a line: text<TAB>pronunciation
    attnserve-client text - --json < book.txt                        # stdin, one JSON object per line

Bulk texts go --batch-size texts per call with --in-flight calls at once, in input order, with a
progress bar on a terminal; a text the server refuses (INVALID_ARGUMENT) is reported with its line
number and the others are converted (exit status 2).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import deque

import grpc
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from attnserve.v1 import attnserve_pb2 as pb
from service.client.connection import rpc_kwargs

TEXT_BATCH_SIZE, TEXT_IN_FLIGHT = 8, 4
KIND_NAME = {pb.TOKEN_KIND_WORD: "word", pb.TOKEN_KIND_NUMBER: "number", pb.TOKEN_KIND_ABBREVIATION: "abbreviation",
             pb.TOKEN_KIND_PUNCTUATION: "punctuation", pb.TOKEN_KIND_SYMBOL: "symbol"}


def add_parser(sub, common: argparse.ArgumentParser, positive) -> None:
    t = sub.add_parser("text", parents=[common], help="running text -> pronunciation (numbers, abbreviations, "
                       "punctuation kept), each word traced to its characters")
    t.add_argument("texts", nargs="*", metavar="TEXT", help='texts; a lone "-" reads them from stdin (as --file -)')
    t.add_argument("--file", metavar="PATH", help='one text per line from PATH ("-": stdin): text<TAB>pronunciation lines')
    t.add_argument("--batch-size", type=positive, default=TEXT_BATCH_SIZE, metavar="N",
                   help="texts per TransduceText call with --file (default: %(default)s)")
    t.add_argument("--in-flight", type=positive, default=TEXT_IN_FLIGHT, metavar="N",
                   help="calls in flight at once with --file (default: %(default)s)")
    t.add_argument("--alphabet", choices=["model", "arpabet", "ipa"], default="model",
                   help="the pronunciations' symbols (ipa: English ARPAbet models; default: the model's own)")
    t.add_argument("--separator", default=None, metavar="S", help='between words (default " | ", or " " for IPA)')
    t.add_argument("--no-lexicon", action="store_true", help="decode every word with the model")
    t.add_argument("--allow-unknown", action="store_true",
                   help="decode words with characters outside the model's alphabet (flagged) instead of skipping them")
    t.set_defaults(func=cmd_text, check=check_args)


def check_args(parser: argparse.ArgumentParser, args) -> None:
    if args.texts == ["-"] and args.file is None:
        args.texts, args.file = [], "-"
    if args.file is not None and args.texts:
        parser.error("give texts as TEXT arguments or with --file, not both")
    if args.file is None and not args.texts:
        parser.error("no texts: give TEXT arguments, --file PATH, or - for stdin")


def _options(args, attention: bool) -> pb.TextOptions:
    options = pb.TextOptions(return_attention=attention, bypass_lexicon=args.no_lexicon,
                             allow_unknown_symbols=args.allow_unknown, alphabet=args.alphabet)
    if args.separator is not None:
        options.word_separator = args.separator
    return options


def _bulk(stub, texts: list[str], options, args, rpc_kwargs: dict):
    """(text, TextResult or the refusal's details) per text, in order."""
    console = Console(stderr=True)
    progress = Progress(TextColumn("reading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, disable=not console.is_terminal)
    pending: deque = deque()

    def call(batch):
        return stub.TransduceText.future(pb.TransduceTextRequest(texts=batch, options=options, model_name=args.model),
                                         **rpc_kwargs)

    def oldest():
        batch, future = pending.popleft()
        try:
            results = list(future.result().results)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            results = []
            for text in batch:  # again one by one: only the refused text fails
                try:
                    results.append(call([text]).result().results[0])
                except grpc.RpcError as one:
                    if one.code() != grpc.StatusCode.INVALID_ARGUMENT:
                        raise
                    results.append(one.details())
        progress.advance(task, len(batch))
        return list(zip(batch, results))

    with progress:
        task = progress.add_task("reading", total=len(texts))
        try:
            for start in range(0, len(texts), args.batch_size):
                batch = texts[start:start + args.batch_size]
                pending.append((batch, call(batch)))
                if len(pending) >= args.in_flight:
                    yield from oldest()
            while pending:
                yield from oldest()
        finally:
            for _, future in pending:
                future.cancel()


def _read_lines(path: str) -> tuple[list[str], list[int]]:
    lines = sys.stdin.read().splitlines() if path == "-" else open(path, encoding="utf-8").read().splitlines()
    kept = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    return [t for _, t in kept], [n for n, _ in kept]


def unread_words(r) -> str | None:
    """A result none of whose words the model read: those words, space-separated; else None."""
    words = [t for t in r.tokens if t.kind == pb.TOKEN_KIND_WORD]
    if not words or any(t.words for t in words):
        return None
    return " ".join(t.text for t in words)


def who_reads(stub, model: str, words: str, call_kwargs: dict) -> str:
    """Which served models read `words`, as the server says it: its refusal of them as one input
    (a word call) names them by the server's own rule (each model's normalization and alphabet).
    "" when the server says nothing of it (the words too long for one input, say)."""
    try:
        stub.Transduce(pb.TransduceRequest(inputs=[words], model_name=model), **call_kwargs)
    except grpc.RpcError as e:
        said = e.details().rsplit("; ", 1)[-1] if e.code() == grpc.StatusCode.INVALID_ARGUMENT else ""
        return said if said.startswith(("models that read it", "no served model reads it")) else ""
    return ""


def _show(console: Console, text: str, r) -> None:
    console.print(Text.assemble((text, "bold"), " -> ", (r.pronunciation, "bold cyan")))
    console.print(Text(f"  read as: {r.spoken}", style="dim"))
    for t in r.tokens:
        line = Text(f"  [{t.start}:{t.end}] {KIND_NAME[t.kind]:<12} {t.text!r}")
        if t.unread:
            line.append(f"  unread at {list(t.unread)}", style="yellow")
        for w in t.words:
            line.append(f"  {w.text} -> {w.result.output_text}", style="cyan")
            if w.alternatives:
                line.append(f" (also {', '.join(w.alternatives)})", style="dim")
        console.print(line)


def cmd_text(stub, args) -> int:
    call_kwargs = rpc_kwargs(args)  # the CLI's one deadline per call
    if args.file is None:
        resp = stub.TransduceText(pb.TransduceTextRequest(texts=args.texts, options=_options(args, args.json),
                                                          model_name=args.model), **call_kwargs)
        if args.json:
            print(json.dumps({"model": {"name": resp.model_name, "version": resp.model_version},
                              "results": [MessageToDict(r) for r in resp.results]}, indent=2, ensure_ascii=False))
            return 0
        console = Console()
        console.print(Text(f"model {resp.model_name} {resp.model_version}", style="dim"))
        for text, r in zip(args.texts, resp.results):
            _show(console, text, r)
            if (words := unread_words(r)) is not None and (said := who_reads(stub, resp.model_name, words, call_kwargs)):
                console.print(Text(f"  {resp.model_name} reads none of its words; {said}", style="yellow"))
        return 0
    texts, lines = _read_lines(args.file)
    refused = 0
    try:
        for text, r in _bulk(stub, texts, _options(args, False), args, call_kwargs):
            if isinstance(r, str):
                refused += 1
                print(f"{args.file if args.file != '-' else '<stdin>'}:{lines[texts.index(text)]}: {r}", file=sys.stderr)
                if args.json:
                    print(json.dumps({"text": text, "error": r}, ensure_ascii=False))
            elif args.json:
                print(json.dumps({"text": text, "spoken": r.spoken, "pronunciation": r.pronunciation,
                                  "complete": r.complete}, ensure_ascii=False))
            else:
                print(f"{text}\t{r.pronunciation}")
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if refused:
        print(f"{refused} of {len(texts)} texts refused (above); the others were converted", file=sys.stderr)
        return 2
    return 0
