// The page's text box: running text through the Open Inference Protocol's REST binding with the
// parameter text: true (service/transport/oip.py). Shows the pronunciation (punctuation in place), the
// text as read, each token with its span, kind and words, and each word's attention on the text's own
// characters (its TOKENS element's char_attention), as app.js draws a word's.
"use strict";

// One word's (rows x cols) attention on the text's characters [start, end).
function charHeatmap(word, text, t, k) {
  const a = word.char_attention;
  const src = Array.from(text).slice(word.start, word.end);
  const tgt = [...word.tokens, "</s>"].slice(0, a.rows);
  const table = el("table", { class: "heatmap chars", data: { token: t, word: k, start: word.start, end: word.end } });
  table.append(el("thead", {}, el("tr", {}, el("th"), ...src.map((s) => el("th", { scope: "col" }, s)))));
  const body = el("tbody");
  for (let i = 0; i < a.rows; i++) {
    const tr = el("tr", {}, el("th", { scope: "row" }, tgt[i] || String(i)));
    for (let j = 0; j < a.cols; j++) {
      const w = a.weights[i * a.cols + j];
      tr.append(el("td", {
        class: w > 0.5 ? "dark" : "", title: `${tgt[i]} \u2190 ${src[j]}: ${w}`, textContent: w.toFixed(2),
        style: `background: ${colour(w)}`, data: { row: i, col: j, weight: String(w) },
      }));
    }
    body.append(tr);
  }
  table.append(body);
  return table;
}

function renderText(text, doc) {
  const section = el("section", { class: "text" },
    el("h2", {}, "Pronunciation"), el("p", { class: "pronunciation" }, doc.pronunciation),
    el("p", { class: "spoken" }, "read as: ", doc.spoken));
  const rows = el("tbody");
  const maps = el("div", { class: "maps" });
  doc.tokens.forEach((token, t) => {
    const said = token.words.map((w) => `${w.text} \u2192 ${w.pronunciation}` +
      (w.alternatives.length ? ` (also ${w.alternatives.join(", ")})` : "")).join("; ");
    rows.append(el("tr", { class: token.unread.length ? "unread" : "", data: { token: t, kind: token.kind } },
      el("td", {}, `${token.start}\u2013${token.end}`), el("td", {}, token.text), el("td", {}, token.kind),
      el("td", { class: "said" }, token.unread.length ? "(unread: not in the model's alphabet)" : said)));
    token.words.forEach((word, k) => {
      if (!word.char_attention) return;
      maps.append(el("div", { class: "hypothesis" },
        el("h3", {}, `${token.text}: `, el("b", {}, word.pronunciation)), charHeatmap(word, text, t, k)));
    });
  });
  const table = el("table", { class: "tokens" }, el("thead", {}, el("tr", {},
    el("th", {}, "span"), el("th", {}, "token"), el("th", {}, "kind"), el("th", {}, "words"))), rows);
  section.append(table, maps);
  $("results").replaceChildren(section);
  // The model reads none of the text's words: the server names the served models that read them.
  if (doc.readers) {
    showError(doc.readers.length ? `${$("model").value} reads none of these words; models that read them: ` +
      doc.readers.join(", ") : `${$("model").value} reads none of these words, nor does any served model`);
  }
}

async function readText(event) {
  event.preventDefault();
  // An empty box reads its placeholder's example sentence, as the page shows it.
  const text = $("text").value.trim() ? $("text").value : $("text").dataset.example;
  const model = $("model").value;
  if (!model) { showError("no model to ask: none is READY (or the token is missing)"); return; }
  const body = {
    inputs: [{ name: "TEXT", datatype: "BYTES", shape: [1], data: [text] }],
    parameters: { text: true, alphabet: $("alphabet").value }, outputs: [{ name: "TOKENS" }],
  };
  await infer(model, body, $("read"), "reading", (reply) => {
    renderText(text, JSON.parse(reply.outputs[0].data[0]));
    return "one text";
  });
}

$("textquery").addEventListener("submit", readText);
