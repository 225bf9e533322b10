"""Homographs read by their sentence (service/answering/context.py) over a real server: g2p-en-stress and
its context model homograph-en, as committed under models/. The reading chosen, the reason returned, a
word the context model does not cover, the context model not served, and one answer per sentence
whether it comes alone or in a batch."""
import grpc
import pytest

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from tests.live import REPO, ServerSetup, loopback_config, serving

MODEL, CONTEXT = "g2p-en-stress", "homograph-en"


def repository(root, names):
    for name in names:
        (root / name).symlink_to(REPO / "models" / name, target_is_directory=True)
    return root


def config(root):
    return loopback_config(model_repository=root, default_model=MODEL, server={"metrics_port": -1},
                           answering={"cache_entries": 0})


@pytest.fixture(scope="module")
def server_setup(tmp_path_factory):
    return ServerSetup(config(repository(tmp_path_factory.mktemp("homographs"), (MODEL, CONTEXT))))


async def read(port: int, texts: list[str]) -> list[pb.TextResult]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await pbg.TransducerStub(channel).TransduceText(
            pb.TransduceTextRequest(texts=texts, model_name=MODEL), timeout=60)
    return list(reply.results)


def word(result: pb.TextResult, text: str) -> pb.TextWord:
    found = [w for t in result.tokens for w in t.words if w.text.lower() == text]
    assert len(found) == 1, (text, result.pronunciation)
    return found[0]


@pytest.mark.parametrize("text, homograph, said, reading", [
    ("I will read it again.", "read", "R IY1 D", "read_present"),
    ("I have read it.", "read", "R EH1 D", "read_past"),
    ("The lead singer sang.", "lead", "L IY1 D", "lead_nou-vrb"),
    ("a lead pipe", "lead", "L EH1 D", "lead_nou"),
])
async def test_the_sentence_chooses_the_reading_and_says_why(server, text, homograph, said, reading):
    w = word((await read(server.port, [text]))[0], homograph)
    assert " ".join(w.result.output_tokens) == said
    # The reason: the context words the model attended to most, then the reading and the model.
    assert w.choice.startswith("context: \"") and f"-> {reading} (" in w.choice and CONTEXT in w.choice, w.choice
    named = [part.split('"')[1] for part in w.choice.split(" -> ")[0].removeprefix("context: ").split(", ")]
    assert named and all(n in text.lower() for n in named), w.choice
    assert len(w.alternatives) == 1 and w.alternatives[0] != said  # the other reading stays an alternative


async def test_a_word_the_context_model_does_not_cover_keeps_the_primary_rule(server):
    w = word((await read(server.port, ["The lead singer sang."]))[0], "the")
    assert len(w.alternatives) >= 1  # several pronunciations: the lexicon's first, saying so
    assert w.choice.startswith("lexicon: the first of its") and f"{CONTEXT!r} does not cover it" in w.choice


async def test_the_choice_does_not_depend_on_the_batch(server_setup, server):
    texts = ["The lead singer sang.", "I have read it.", "Lead poisoning is rare.", "I will read it again.",
             "She took the lead in the second lap.", "They read the papers every morning."]
    together = await read(server.port, texts)
    # Another server, so nothing it kept of the batch answers the lone calls.
    async with serving(server_setup.config) as alone_server:
        alone = [(await read(alone_server.port, [t]))[0] for t in texts]
    for a, b, text in zip(together, alone, texts):
        assert a.pronunciation == b.pronunciation, text
        assert [w.choice for t in a.tokens for w in t.words] == [w.choice for t in b.tokens for w in t.words], text


async def test_without_its_context_model_the_primary_reading_says_so(tmp_path):
    async with serving(config(repository(tmp_path, (MODEL,)))) as s:
        w = word((await read(s.port, ["I have read it."]))[0], "read")
    assert " ".join(w.result.output_tokens) == "R EH1 D"  # the lexicon's first
    assert w.choice == f"lexicon: the primary pronunciation (the context model {CONTEXT!r} is not served)"


async def test_a_refusal_never_names_the_context_model_as_a_reader(tmp_path):
    """homograph-en's vocabulary is English words (`the` among them), but it pronounces nothing: a word
    that a Bulgarian model cannot read is never sent to it by a refusal's list of the models that read it."""
    async with serving(loopback_config(model_repository=repository(tmp_path, ("g2p-bul", CONTEXT)),
                                       default_model="g2p-bul", server={"metrics_port": -1})) as s:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["the"]), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no served model reads it" in refused.value.details(), refused.value.details()
