"""The families transformers runs for us (Qwen3-MoE, Gemma 3, Phi-3, and our four through the same path), each as a
random-weight folder in its real config.json shape: served by our scheduler (greedy tokens and prompt logprobs equal
transformers' own, ≤ 1e-4), trained (a LoRA step's adapter gradients equal PEFT's on the saved adapter, ≤ 1e-4
relative), rows with different adapters batched together, and the engine's choice and announcement of
implementations. The PEFT comparison runs the reference venv (REFERENCE_PYTHON) and is skipped without it."""

import json
import os
import subprocess
import tempfile
import unittest

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from engine import loading, peft, server, steps
from engine import lora as L
from engine import weights as W
from engine.generate import GenRequest, Scheduler, SchedulerConfig
from engine.hf_model import HFModel
from engine.model import ForwardContext, Transformer
from engine.tests.families import NEW_FAMILIES, OURS, write_family
from engine.tests.helpers import REPO, lora, sampling
from engine.tests.test_lora import randomize
from engine.tests.test_steps import ADAM
from engine.train import row_logprobs
from engine.wire import parse

VOCAB = 512
REFERENCE = os.environ.get("REFERENCE_PYTHON")


def run(sched: Scheduler, reqs: list) -> None:
    for r in reqs:
        sched.submit(r)
    for _ in range(200):
        if not sched.has_work():
            return
        sched.step()
    raise AssertionError("generation did not finish")


def greedy(model, prompt: list, adapter=None, n_tokens: int = 6) -> tuple:
    """(tokens, prompt logprobs) of a greedy request on a fresh scheduler of our engine."""
    got = {"tokens": [], "prompt": None}

    def emit(m):
        if m["type"] == "tokens":
            got["tokens"] += m["tokens"]
        elif m["type"] == "prompt":
            got["prompt"] = [e["logprob"] for e in m["prompt_logprobs"][1:]]

    params = sampling(model.args.vocab_size, temperature=0, max_tokens=n_tokens, ignore_eos=True, prompt_logprobs=0)
    req = GenRequest(id="r", prompt=prompt, params=params, emit=emit, finish=lambda m: got.setdefault("end", m))
    req.adapter = adapter
    run(Scheduler(model, [], SchedulerConfig(max_batch=4, max_len=64)), [req])
    assert "error" not in got["end"], got["end"]
    return got["tokens"], got["prompt"]


class TestFamilies(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.folders = {f: write_family(f, os.path.join(cls.dir.name, f), 1, VOCAB) for f in NEW_FAMILIES + OURS}
        cls.models = {f: HFModel.from_pretrained(p, torch.float32) for f, p in cls.folders.items()}

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def reference(self, family: str):
        return AutoModelForCausalLM.from_pretrained(self.folders[family], dtype=torch.float32).eval()

    def test_greedy_tokens_and_prompt_logprobs_equal_transformers(self):
        prompt = [5, 17, 99, 3, 250, 7, 41, 8, 300, 12]  # longer than gemma3's sliding window of 4
        for family, model in self.models.items():
            with self.subTest(family=family):
                tokens, prompt_lp = greedy(model, prompt)
                ref = self.reference(family)
                with torch.no_grad():
                    want = ref.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, min_new_tokens=6)
                    lp = torch.log_softmax(ref(torch.tensor([prompt])).logits[0, :-1].float(), -1)
                self.assertEqual(tokens, want[0, len(prompt) :].tolist())
                want_lp = lp.gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
                self.assertLessEqual((torch.tensor(prompt_lp) - want_lp).abs().max().item(), 1e-4)

    def test_our_four_agree_with_our_own_implementation(self):
        tokens = torch.tensor([[3, 9, 27, 81, 243, 200, 100, 50]])
        seg = torch.zeros_like(tokens)
        for family in OURS:
            with self.subTest(family=family):
                ours = Transformer.from_pretrained(self.folders[family], torch.float32)
                theirs = self.models[family]
                with torch.no_grad():
                    a = ours.logits(ours(tokens, ForwardContext.packed(seg))[0])
                    b = theirs.logits(theirs(tokens, ForwardContext.packed(seg))[0])
                self.assertLessEqual((a - b).abs().max().item(), 1e-4)

    def test_our_implementation_reads_the_rope_parameters_transformers_5_writes(self):
        with tempfile.TemporaryDirectory() as d:
            path = write_family("llama", d, 2, VOCAB)
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
            cfg.update(
                rope_theta=500000.0,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            )
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(cfg, f)
            AutoConfig.from_pretrained(path).save_pretrained(path)  # transformers 5 writes rope_parameters
            with open(os.path.join(path, "config.json")) as f:
                self.assertIn("rope_parameters", json.load(f))
            ours = loading.load_model(path, torch.float32, "cpu")
            self.assertEqual(ours.implementation, "ours")
            tokens = torch.arange(3, 200, 3)[None]
            with torch.no_grad():
                got = ours.logits(ours(tokens, ForwardContext.packed(torch.zeros_like(tokens)))[0])
                want = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)(tokens).logits[0]
            self.assertLessEqual((got - want).abs().max().item(), 1e-4)

    def test_rows_with_different_adapters_batch_as_they_run_alone(self):
        model = self.models["qwen3_moe"]
        targets = model.lora_targets()
        adapters = [randomize(L.new_adapter(f"a{i}", "b", targets, lora(seed=i), "cpu"), i, 0.3) for i in (1, 2)]
        prompts = [[5, 6, 7, 8, 9], [40, 41, 42]]
        alone = [greedy(model, p, a)[0] for p, a in zip(prompts, adapters)]
        base_alone = greedy(model, prompts[0])[0]
        self.assertNotEqual(alone[0], base_alone)  # the adapter changes what is sampled
        together: dict = {}
        reqs = []
        for i, (p, a) in enumerate([*zip(prompts, adapters), (prompts[0], None)]):
            params = sampling(VOCAB, temperature=0, max_tokens=6, ignore_eos=True)

            def emit(m, i=i):
                together.setdefault(i, []).extend(m["tokens"] if m["type"] == "tokens" else [])

            reqs.append(GenRequest(id=str(i), prompt=p, params=params, emit=emit, finish=lambda m: None, adapter=a))
        run(Scheduler(model, [], SchedulerConfig(max_batch=4, max_len=64)), reqs)
        self.assertEqual([together[0], together[1], together[2]], [*alone, base_alone])

    def test_tinker_ops_train_the_moe_model(self):
        model = self.models["qwen3_moe"]
        adapter = L.new_adapter("a", "b", model.lora_targets(), lora(seed=6), "cpu")
        g = torch.Generator().manual_seed(0)
        rows = []
        for T in (7, 5, 9):
            toks = torch.randint(3, VOCAB, (T + 1,), generator=g).tolist()
            rows.append({"tokens": toks[:-1], "target_tokens": toks[1:], "weights": [1.0] * T})
        fb = {"base": "b", "adapter": "a", "loss": "cross_entropy", "loss_config": {}, "backward": True, "rows": rows}
        losses = []
        for i in range(4):
            req = parse("forward_backward", fb)
            losses.append(steps.forward_backward(model, adapter, req.loss, req.loss_config, req.rows, True)["loss"])
            adam = parse("optim_step", {"base": "b", "adapter": "a", "adam": {**ADAM, "learning_rate": 1e-2}}).adam
            self.assertEqual(steps.optim_step(adapter, adam)["step"], i + 1)
        self.assertLess(losses[-1], losses[0])
        experts = "model.layers.0.mlp.experts.gate_proj"
        self.assertGreater(adapter.B[experts].abs().max().item(), 0)  # the experts' adapters trained too

    def test_layers_recomputed_in_backward_give_the_same_gradients(self):
        model = self.models["qwen3_moe"]
        tokens, seg = torch.tensor([5, 17, 99, 3, 250, 7, 41, 8]), torch.zeros(8, dtype=torch.long)
        grads = []
        for recompute_tokens in (1 << 30, 1):
            model.recompute_tokens = recompute_tokens
            adapter = randomize(L.new_adapter("a", "b", model.lora_targets(), lora(seed=5), "cpu"), 5, 0.2)
            lp_T, _, _ = row_logprobs(model, tokens, seg, L.LoraBatch([adapter], torch.float32, "cpu"))
            lp_T.sum().backward()
            grads.append([p.grad.clone() for p in adapter.parameters()])
        model.recompute_tokens = 4096
        for a, b in zip(*grads):
            self.assertTrue(torch.allclose(a, b, atol=1e-6), "recomputed layers change the gradient")

    @unittest.skipUnless(REFERENCE, "REFERENCE_PYTHON (transformers + PEFT) is not set")
    def test_lora_gradients_equal_peft(self):
        tokens = [5, 17, 99, 3, 250, 7, 41, 8, 300, 12, 77]
        weights = [0.3 + 0.1 * i for i in range(len(tokens) - 1)]
        for family in NEW_FAMILIES + ("llama",):
            with self.subTest(family=family), tempfile.TemporaryDirectory() as d:
                model = self.models[family]
                every = tuple(L.target_kinds(model.lora_targets()))
                config = lora(rank=4, seed=3, target_modules=every)
                adapter = randomize(L.new_adapter("a", "b", model.lora_targets(), config, "cpu"), 3, 0.2)
                L.save_peft(adapter, d, self.folders[family])
                lp_T, _, _ = row_logprobs(
                    model,
                    torch.tensor(tokens),
                    torch.zeros(len(tokens), dtype=torch.long),
                    L.LoraBatch([adapter], torch.float32, "cpu"),
                )
                (-(lp_T[1:] * torch.tensor(weights)).sum()).backward()
                ours = {k: t for k, t in L.peft_tensors(_grads(adapter)).items()}
                request = {"base": self.folders[family], "adapter": d, "tokens": tokens, "weights": weights, "rank": 4}
                out = subprocess.run(
                    [REFERENCE, os.path.join(REPO, "engine", "tests", "peft_reference.py")],
                    input=json.dumps(request),
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=300,
                )
                ref = json.loads(out.stdout)
                self.assertLessEqual((lp_T[1:] - torch.tensor(ref["logprobs"])).abs().max().item(), 1e-4)
                self.assertEqual(sorted(ref["grads"]), sorted(ours))
                for name, g in ours.items():
                    want = torch.tensor(ref["grads"][name])
                    scale = want.abs().max().item()  # zero for an expert no token was routed to, in both
                    self.assertLessEqual((g - want).abs().max().item(), 1e-4 * scale, name)
                self.assertGreater(
                    sum(bool(torch.tensor(g).abs().max() > 0) for g in ref["grads"].values()), len(ours) // 2
                )

    def test_engine_picks_an_implementation_per_base_and_refuses_what_none_loads(self):
        for family, path in self.folders.items():
            model = loading.load_model(path, torch.float32, "cpu")
            self.assertEqual(model.implementation, "ours" if family in OURS else "transformers", family)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": "qwen3_next", "layer_types": ["linear_attention", "full_attention"]}, f)
            with self.assertRaisesRegex(ValueError, r"linear_attention.*recurrent state"):
                loading.load_model(d, torch.float32, "cpu")
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": "no_such_family"}, f)
            with self.assertRaisesRegex(ValueError, "no_such_family"):
                loading.load_model(d, torch.float32, "cpu")
        engine = server.Engine(torch.device("cpu"))
        reply = engine.load_base("r", server.wire.parse("load_base", {"base": "phi", "path": self.folders["phi3"]}))
        server.schema.check_reply("load_base", reply)
        self.assertEqual(reply["implementation"], "transformers")
        self.assertEqual(
            reply["lora_targets"],
            {"o_proj": "attention", "qkv_proj": "attention", "gate_up_proj": "mlp", "down_proj": "mlp"},
        )
        announced = loading.supports()["transformers"]
        self.assertEqual(announced["causal_lm"]["qwen3_moe"], "Qwen3MoeForCausalLM")
        self.assertEqual(announced["causal_lm"]["gemma3_text"], "Gemma3ForCausalLM")

    def test_moe_targets_are_peft_names_and_a_missing_one_is_named(self):
        model = self.models["qwen3_moe"]
        self.assertEqual(
            L.target_kinds(model.lora_targets()),
            {
                n: k
                for n, k in [
                    ("q_proj", "attention"),
                    ("k_proj", "attention"),
                    ("v_proj", "attention"),
                    ("o_proj", "attention"),
                    ("gate_proj", "mlp"),
                    ("up_proj", "mlp"),
                    ("down_proj", "mlp"),
                ]
            },
        )
        with self.assertRaisesRegex(ValueError, "'w1'"):
            L.new_adapter("x", "b", model.lora_targets(), lora(target_modules=("q_proj", "w1")), "cpu")
        adapter = L.new_adapter("x", "b", model.lora_targets(), lora(seed=4), "cpu")
        names = L.peft_tensors(adapter)
        self.assertIn("base_model.model.model.layers.1.mlp.experts.7.down_proj.lora_B.weight", names)
        self.assertNotIn("base_model.model.model.layers.1.mlp.gate.lora_A.weight", names)  # the router stays frozen
        with tempfile.TemporaryDirectory() as d:
            L.save_peft(randomize(adapter, 4, 0.2), d, "b")
            back = peft.load_peft("y", "b", d, model.lora_targets(), "cpu")
            for path in adapter.A:
                self.assertTrue(torch.equal(adapter.B[path], back.B[path]), path)
            # check_adapter on a base that is not loaded: its table from the config alone (meta device)
            engine = server.Engine(torch.device("cpu"))
            check = lambda: engine.check_adapter("r", parse("check_adapter", {"path": d, "base_path": base}))  # noqa: E731
            base = self.folders["qwen3_moe"]
            self.assertEqual(check()["problems"], [])
            with open(os.path.join(d, L.CONFIG_NAME)) as f:
                config = json.load(f)
            with open(os.path.join(d, L.CONFIG_NAME), "w") as f:
                json.dump({**config, "target_modules": ["w1", "q_proj"]}, f)
            self.assertEqual(
                check()["problems"][0],
                {
                    "loc": [L.CONFIG_NAME, "target_modules"],
                    "msg": '"w1" is not supported; supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, '
                    "down_proj",
                },
            )
            with open(os.path.join(d, L.CONFIG_NAME), "w") as f:
                json.dump(config, f)
            tensors = W.load_file(os.path.join(d, L.WEIGHTS_NAME))
            del tensors["base_model.model.model.layers.1.mlp.experts.3.up_proj.lora_A.weight"]
            W.save_file(tensors, os.path.join(d, L.WEIGHTS_NAME))
            msgs = [p["msg"] for p in check()["problems"]]
            self.assertIn("model.layers.1.mlp.experts.up_proj lacks lora_A of experts [3]", msgs)


def _grads(adapter: L.Adapter) -> L.Adapter:
    """The adapter's gradients in its own shape (so peft_tensors names them as the file does)."""
    return L.Adapter(
        key="g",
        base="b",
        config=adapter.config,
        A={p: t.grad for p, t in adapter.A.items()},
        B={p: t.grad for p, t in adapter.B.items()},
    )


if __name__ == "__main__":
    unittest.main()
