"""attnserve-client: transduce words over gRPC and show the attention behind each output.

Also beam search n-best lists (--beam/--n-best), bulk conversion of a word list
(--file PATH or -: input<TAB>output lines, batched calls, a progress bar), and running text
(`text`: service/client/text.py).

Client side only: never imports torch, and matplotlib is imported only for --png so
the terminal path starts quickly and works without a display.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from collections import deque
from collections.abc import Iterator

import grpc
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from attnserve.v1 import attnserve_pb2, attnserve_pb2_grpc
from service.client.heatmap import attention_matrix, render_heatmap, result_to_dict, write_png  # noqa: F401 (API)
from service.client import text
from service.client.connection import (DEFAULT_SERVER, add_connection_args, checked, open_channel,  # noqa: F401 (API)
                                       rpc_kwargs)

# Bulk conversion: inputs per Transduce call, and calls in flight at once (the server
# batches concurrent calls together, so a few in flight keep its batches full).
BULK_BATCH_SIZE, BULK_IN_FLIGHT = 64, 4
ORIGIN_LABEL = {attnserve_pb2.ORIGIN_LEXICON: "lexicon", attnserve_pb2.ORIGIN_OVERRIDE: "override",
                attnserve_pb2.ORIGIN_RULE: "rule"}


def _summary(input_text: str, result) -> Text:
    lp = result.log_prob
    line = Text.assemble((input_text, "bold"), " -> ", (result.output_text, "bold cyan"))
    line.append(f"   log_prob {lp:.4f}  p={math.exp(lp):.4f}")
    if result.origin in ORIGIN_LABEL:  # a dictionary's answer, scored and aligned by the model
        line.append(f"  [{ORIGIN_LABEL[result.origin]}]", style="green")
    if not result.finished:
        line.append("  (cut at the length limit)", style="yellow")
    return line


def _alternative(rank: int, result) -> Text:
    line = Text.assemble(f"  {rank}. ", (result.output_text, "cyan"))
    line.append(f"   score {result.score:.4f}  log_prob {result.log_prob:.4f}")
    if not result.finished:
        line.append("  (cut at the length limit)", style="yellow")
    return line


def _decode_options(args, return_attention: bool) -> attnserve_pb2.DecodeOptions:
    return attnserve_pb2.DecodeOptions(return_attention=return_attention, max_output_len=args.max_output_len,
                                       beam_size=args.beam, n_best=args.n_best, bypass_lexicon=args.no_lexicon,
                                       allow_unknown_symbols=args.allow_unknown)


def read_numbered_inputs(path: str) -> tuple[list[str], list[int]]:
    """One input per line of a UTF-8 file ("-": standard input), blank lines skipped, and each
    input's line number (1-based), for reporting a refused one."""
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    kept = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    return [text for _, text in kept], [n for n, _ in kept]



class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f} inputs/s" if task.speed else "", style="progress.data.speed")


class BadInput:
    """An input of a bulk run the server refused (INVALID_ARGUMENT): its line and why; the run goes on."""

    def __init__(self, index: int, details: str):
        self.index = index  # 0-based position among the inputs
        self.details = details


def transduce_bulk(stub, inputs: list[str], options, *, batch_size: int = BULK_BATCH_SIZE,
                   in_flight: int = BULK_IN_FLIGHT, rpc_kwargs: dict | None = None,
                   console: Console | None = None, model: str = "") -> Iterator[tuple[str, object]]:
    """(input, Result) for every input, in input order: `batch_size` inputs per Transduce call,
    up to `in_flight` calls at once, with a progress bar on `console` (stderr) when it is a terminal.

    An input the server refuses (INVALID_ARGUMENT: a symbol outside the alphabet, say) does not end
    the run: its call is sent again input by input, and the refused one comes out as (input,
    BadInput) in its place. Any other error (the server unreachable, overloaded) ends the run."""
    console = console or Console(stderr=True)
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        _RateColumn(), TimeRemainingColumn(), console=console, disable=not console.is_terminal)
    pending: deque = deque()  # (inputs, call future), oldest first: results come out in input order

    def one_by_one(start: int, batch: list[str]) -> list[tuple[str, object]]:
        out = []
        for i, text in enumerate(batch):
            request = attnserve_pb2.TransduceRequest(inputs=[text], options=options, model_name=model)
            try:
                out.append((text, stub.Transduce(request, **(rpc_kwargs or {})).results[0]))
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    raise
                out.append((text, BadInput(start + i, e.details())))
        return out

    def oldest() -> list[tuple[str, object]]:
        start, batch, future = pending.popleft()
        try:
            resp = future.result()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            results = one_by_one(start, batch)
        else:
            if len(resp.results) != len(batch):
                raise ValueError(f"server returned {len(resp.results)} results for {len(batch)} inputs")
            results = list(zip(batch, resp.results))
        progress.advance(task, len(batch))
        return results

    with progress:
        task = progress.add_task("transducing", total=len(inputs))
        try:
            for start in range(0, len(inputs), batch_size):
                batch = inputs[start:start + batch_size]
                request = attnserve_pb2.TransduceRequest(inputs=batch, options=options, model_name=model)
                pending.append((start, batch, stub.Transduce.future(request, **(rpc_kwargs or {}))))
                if len(pending) >= in_flight:
                    yield from oldest()
            while pending:
                yield from oldest()
        finally:  # an error, or a reader that stopped early: drop the calls still out
            for _, _, future in pending:
                future.cancel()


def _cmd_bulk(stub, args) -> int:
    """--file: one line per input on stdout, as `input<TAB>output` (or JSON lines with --json).

    A refused input is reported on stderr with its line number (and, with --json, as an object with
    an "error" on stdout, so the lines still match the inputs); the others are converted. Exit
    status 2 when any input was refused."""
    inputs, lines = read_numbered_inputs(args.file)
    options = _decode_options(args, return_attention=False)
    refused = 0
    try:
        for text, r in transduce_bulk(stub, inputs, options, batch_size=args.batch_size,
                                      in_flight=args.in_flight, rpc_kwargs=rpc_kwargs(args), model=args.model):
            if isinstance(r, BadInput):
                refused += 1
                print(f"{args.file if args.file != '-' else '<stdin>'}:{lines[r.index]}: {r.details}", file=sys.stderr)
                if args.json:
                    print(json.dumps({"input": text, "error": r.details}, ensure_ascii=False))
                continue
            if args.json:
                print(json.dumps(result_to_dict(text, r), ensure_ascii=False))
            elif args.n_best > 1:  # one line per hypothesis, best first, each with its ranking score
                for h in (r, *r.alternatives):
                    print(f"{text}\t{h.output_text}\t{h.score:.4f}")
            else:
                print(f"{text}\t{r.output_text}")
    except BrokenPipeError:  # `| head`: the reader has all it wants; keep exit's flush quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if refused:
        print(f"{refused} of {len(inputs)} inputs refused (above); the others were converted", file=sys.stderr)
        return 2
    return 0


def _cmd_transduce(stub, args) -> int:
    if args.file is not None:
        return _cmd_bulk(stub, args)
    options = _decode_options(args, return_attention=not args.no_attention)
    resp = stub.Transduce(attnserve_pb2.TransduceRequest(inputs=args.words, options=options, model_name=args.model),
                          **rpc_kwargs(args))
    if len(resp.results) != len(args.words):
        raise ValueError(f"server returned {len(resp.results)} results for {len(args.words)} inputs")
    items = list(zip(args.words, resp.results))
    if args.png:
        write_png(items, args.png)
        # stderr, so that --json output stays a single JSON document.
        print(f"wrote {args.png}", file=sys.stderr)
    if args.json:
        doc = {"model": {"name": resp.model_name, "version": resp.model_version},
               "results": [result_to_dict(w, r) for w, r in items]}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    console = Console()
    console.print(Text(f"model {resp.model_name} {resp.model_version}", style="dim"))
    for w, r in items:
        console.print(_summary(w, r))
        if r.alternatives:  # beam search n-best: every hypothesis, ranked, with its score
            for rank, h in enumerate((r, *r.alternatives), start=1):
                console.print(_alternative(rank, h))
        if not args.no_attention:
            console.print(render_heatmap(r))
            console.print()
    return 0


def _cmd_score(stub, args) -> int:
    """attnserve-client score knight "N AY T" "K N IH G T": the model's log-probability and
    alignment of each given output."""
    resp = stub.Score(attnserve_pb2.ScoreRequest(
        items=[attnserve_pb2.ScoreItem(source=args.source, candidates=args.candidates)], model_name=args.model,
        return_attention=not args.no_attention), **rpc_kwargs(args))
    scored = list(resp.results[0].candidates)
    if args.json:
        doc = {"model": {"name": resp.model_name, "version": resp.model_version},
               "results": [{**result_to_dict(args.source, r), "token_log_probs": list(r.token_log_probs)}
                           for r in scored]}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    console = Console()
    console.print(Text(f"model {resp.model_name} {resp.model_version}", style="dim"))
    for r in sorted(scored, key=lambda r: -r.log_prob):  # best first
        console.print(_summary(args.source, r))
        console.print(Text("   per token: " + "  ".join(f"{t} {lp:.2f}" for t, lp in zip(
            [*r.output_tokens, "</s>"], r.token_log_probs)), style="dim"))
        if not args.no_attention:
            console.print(render_heatmap(r))
            console.print()
    return 0


def _json_or_text(s: str):
    try:
        return json.loads(s) if s else None
    except json.JSONDecodeError:
        return s


def _cmd_info(stub, args) -> int:
    info = stub.GetModelInfo(attnserve_pb2.GetModelInfoRequest(model_name=args.model), **rpc_kwargs(args))
    metrics = dict(sorted(info.metrics.items()))
    if args.json:
        doc = {"name": info.name, "version": info.version, "precision": info.precision, "metrics": metrics,
               "source_vocab_size": len(info.source_vocab), "target_vocab_size": len(info.target_vocab),
               "config": _json_or_text(info.config_json)}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    lines = [f"model   {info.name} {info.version}",
             f"vocab   source {len(info.source_vocab)}, target {len(info.target_vocab)}"]
    Console().print(Text("\n".join(lines + [f"metric  {k:<12} {v:.4f}" for k, v in metrics.items()])))
    return 0


def _cmd_models(stub, args) -> int:
    reply = stub.ListModels(attnserve_pb2.ListModelsRequest(), **rpc_kwargs(args))
    if args.json:
        print(json.dumps([{"name": m.name, "versions": list(m.versions), "served_version": m.served_version,
                           "state": m.state, "reason": m.reason, "default": m.is_default} for m in reply.models],
                         indent=2, ensure_ascii=False))
        return 0
    table = Table("model", "served", "versions", "state", "reason", box=None)
    for m in reply.models:
        table.add_row(m.name + (" (default)" if m.is_default else ""), m.served_version or "-",
                      " ".join(m.versions) or "-", m.state, m.reason)
    Console().print(table)
    return 0


def _build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_connection_args(common)
    common.add_argument("--model", default="", metavar="NAME",
                        help="the model to ask (default: the server's default model; `models` lists them)")
    common.add_argument("--json", action="store_true",
                        help="print JSON (one document; with --file, one object per line) instead of the terminal view")
    positive = checked(int, lambda v: v >= 1, ">= 1")

    parser = argparse.ArgumentParser(prog="attnserve-client", description="Query an attnserve server.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("transduce", aliases=["phonemes"], parents=[common],
                       help="transduce inputs (any model; for G2P: spelling -> phonemes) and show the attention")
    t.add_argument("words", nargs="*", metavar="WORD", help='inputs; a lone "-" reads them from stdin (as --file -)')
    bulk = t.add_argument_group("bulk conversion")
    bulk.add_argument("--file", metavar="PATH",
                      help='read one input per line from PATH ("-": stdin) and print input<TAB>output lines')
    bulk.add_argument("--batch-size", type=positive, default=BULK_BATCH_SIZE, metavar="N",
                      help="inputs per Transduce call with --file (default: %(default)s)")
    bulk.add_argument("--in-flight", type=positive, default=BULK_IN_FLIGHT, metavar="N",
                      help="Transduce calls in flight at once with --file (default: %(default)s)")
    decoding = t.add_argument_group("decoding")
    decoding.add_argument("--beam", type=positive, default=None, metavar="N",
                          help="beam search width (default: greedy, or K with --n-best K)")
    decoding.add_argument("--n-best", type=positive, default=1, metavar="K",
                          help="show the K best hypotheses with their scores (needs a beam of at least K)")
    decoding.add_argument("--max-output-len", type=checked(int, lambda v: v >= 0, ">= 0"), default=0, metavar="N",
                          help="cap on output tokens (0: the server's limit)")
    t.add_argument("--png", metavar="FILE", help="also write the heat maps as one PNG image")
    t.add_argument("--no-attention", action="store_true", help="do not request the attention weights")
    decoding.add_argument("--no-lexicon", action="store_true",
                          help="decode with the model even for words the model's lexicon or overrides have")
    decoding.add_argument("--allow-unknown", action="store_true",
                          help="decode symbols outside the model's alphabet as unknown (flagged) instead of refusing")
    t.set_defaults(func=_cmd_transduce, check=_check_transduce_args)
    sc = sub.add_parser("score", parents=[common], help="score given outputs: log-probabilities and alignment")
    sc.add_argument("source", help="the input, e.g. knight")
    sc.add_argument("candidates", nargs="+", metavar="CANDIDATE", help='outputs in the model\'s symbols, e.g. "N AY T"')
    sc.add_argument("--no-attention", action="store_true", help="do not request the attention weights")
    sc.set_defaults(func=_cmd_score)
    i = sub.add_parser("info", parents=[common], help="show the served model's name, version and metrics")
    i.set_defaults(func=_cmd_info)
    m = sub.add_parser("models", parents=[common], help="list the server's models: versions, served version, state")
    m.set_defaults(func=_cmd_models)
    text.add_parser(sub, common, positive)  # running text: service/client/text.py
    return parser


def _check_transduce_args(parser: argparse.ArgumentParser, args) -> None:
    """Combinations argparse cannot express; normalises `-` to --file - and the default beam."""
    if args.words == ["-"] and args.file is None:
        args.words, args.file = [], "-"
    if args.file is not None and args.words:
        parser.error("give inputs as WORD arguments or with --file, not both")
    if args.file is None and not args.words:
        parser.error("no inputs: give WORD arguments, --file PATH, or - for stdin")
    if args.file is not None and args.png:
        parser.error("--png draws the heat maps of WORD arguments; --file output has no attention")
    if args.png and args.no_attention:
        parser.error("--png needs the attention weights; drop --no-attention")
    if args.png and importlib.util.find_spec("matplotlib") is None:
        parser.error("--png needs matplotlib: pip install 'attnserve[client]'")
    if args.beam is None:
        args.beam = args.n_best
    if args.n_best > args.beam:
        parser.error(f"--n-best {args.n_best} needs --beam {args.n_best} or wider, got --beam {args.beam}")


def _rpc_error_text(e: grpc.RpcError) -> str:
    # Not every RpcError is also a grpc.Call; fall back rather than raise inside the handler.
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    return f"error: {code.name if code is not None else 'UNKNOWN'}: {details}"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console-script wrapper passes it to sys.exit)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "check"):
        args.check(parser, args)
    try:
        with open_channel(args) as channel:
            return args.func(attnserve_pb2_grpc.TransducerStub(channel), args)
    except grpc.RpcError as e:
        print(_rpc_error_text(e), file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
