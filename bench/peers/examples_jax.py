"""The example programs' training steps (examples/gpt, lstm, resnet) in JAX on the CPU, each one
jax.jit'd function: forward, mean cross-entropy, jax.value_and_grad's gradients and an Adam update
(torch.optim.Adam's formula and defaults, written out as the seed peer writes its Momentum),
parameters and optimizer slots donated; the loss is fetched to the host (float) every step.

    .deps/venv-jax/bin/python bench/peers/examples_jax.py --model gpt|lstm|resnet [--mode jit]
        [--threads 2] [--steps 40] [--warmup 5] [--batch B]

The models are bench/gpt_step.py's, lstm_step.py's and resnet_step.py's PyTorch ones in plain
jax.numpy / lax (PyTorch's default initializations): GPT with one qkv layer per block and
jax.nn.dot_product_attention(is_causal=True); the LSTM as lax.scan over the 64 steps (the input
projection of all steps as one matmul before it); the ResNet in NHWC with SAME padding and batch
norm in training mode (batch statistics; running statistics updated as PyTorch does). One fixed
random batch. Threads: the process is pinned to --threads CPUs before JAX starts (XLA's CPU
client sizes its pool from the affinity mask). Prints one JSON line (examples_common.run); exits
1 when the loss did not decrease."""
import functools
import math
import sys

import examples_common as ec

args = ec.parse_args(["jit"])
ec.pin_cpus(args.threads)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def uniform(key, shape, fan_in):
    """PyTorch's default for linear and convolution layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in)
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def linear(key, n_in, n_out):
    kw, kb = jax.random.split(key)
    return uniform(kw, (n_in, n_out), n_in), uniform(kb, (n_out,), n_in)


def dense(p, x):
    return x @ p[0] + p[1]


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]))
    return -jnp.take_along_axis(logp, labels.reshape(-1, 1), axis=1).mean()


# --- GPT -----------------------------------------------------------------------------------------
def layer_norm(x, p, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p[0] + p[1]


def gpt_init(key):
    g = ec.GPT
    w = g["width"]

    def norm():  # (each its own buffers: they are donated)
        return jnp.ones(w), jnp.zeros(w)

    keys = iter(jax.random.split(key, 3 + 4 * g["blocks"]))
    params = {"tok": jax.random.normal(next(keys), (g["vocab"], w)),
              "pos": 0.02 * jax.random.normal(next(keys), (g["context"], w)), "blocks": []}
    for _ in range(g["blocks"]):
        params["blocks"].append({
            "ln1": norm(), "qkv": linear(next(keys), w, 3 * w), "proj": linear(next(keys), w, w),
            "ln2": norm(), "fc": linear(next(keys), w, g["hidden"]),
            "out": linear(next(keys), g["hidden"], w)})
    params["ln_f"] = norm()
    params["head"] = linear(next(keys), w, g["vocab"])
    return params, ()


def gpt_loss(p, state, tokens, targets):
    b, t = tokens.shape
    w, heads = ec.GPT["width"], ec.GPT["heads"]
    h = p["tok"][tokens] + p["pos"][:t]
    for blk in p["blocks"]:
        q, k, v = jnp.split(dense(blk["qkv"], layer_norm(h, blk["ln1"])), 3, axis=-1)
        q, k, v = (z.reshape(b, t, heads, w // heads) for z in (q, k, v))  # [B, T, N, H]
        a = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, w)
        h = h + dense(blk["proj"], a)
        mlp = jax.nn.gelu(dense(blk["fc"], layer_norm(h, blk["ln2"])), approximate=False)
        h = h + dense(blk["out"], mlp)
    return cross_entropy(dense(p["head"], layer_norm(h, p["ln_f"])), targets), state


def gpt_batch(key):
    kx, ky = jax.random.split(key)
    shape = (args.batch, ec.GPT["context"])
    return (jax.random.randint(kx, shape, 0, ec.GPT["vocab"]),
            jax.random.randint(ky, shape, 0, ec.GPT["vocab"]))


# --- LSTM ----------------------------------------------------------------------------------------
def lstm_init(key):
    c = ec.LSTM
    ke, ki, kh, kb, kd = jax.random.split(key, 5)
    units = c["units"]
    return {"emb": jax.random.normal(ke, (c["vocab"], c["embed"])),
            # gates i, f, g, o side by side (PyTorch's order); one bias (PyTorch's b_ih + b_hh)
            "w_ih": uniform(ki, (c["embed"], 4 * units), units),
            "w_hh": uniform(kh, (units, 4 * units), units),
            "b": uniform(kb, (4 * units,), units),
            "head": linear(kd, units, c["vocab"])}, ()


def lstm_loss(p, state, tokens, targets):
    b = tokens.shape[0]
    units = ec.LSTM["units"]
    xw = p["emb"][tokens] @ p["w_ih"] + p["b"]  # [B, T, 4U]: all steps' input projections

    def cell(carry, xw_t):
        h, c = carry
        i, f, g, o = jnp.split(xw_t + h @ p["w_hh"], 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((b, units))
    _, hs = lax.scan(cell, (zeros, zeros), jnp.swapaxes(xw, 0, 1))  # hs: [T, B, U]
    return cross_entropy(dense(p["head"], jnp.swapaxes(hs, 0, 1)), targets), state


def lstm_batch(key):
    kx, ky = jax.random.split(key)
    shape = (args.batch, ec.LSTM["length"])
    return (jax.random.randint(kx, shape, 0, ec.LSTM["vocab"]),
            jax.random.randint(ky, shape, 0, ec.LSTM["vocab"]))


# --- ResNet --------------------------------------------------------------------------------------
def conv_bn_init(key, cin, cout, k):
    """A convolution without bias (HWIO) and its batch norm: parameters and running statistics."""
    return ((uniform(key, (k, k, cin, cout), cin * k * k), jnp.ones(cout), jnp.zeros(cout)),
            (jnp.zeros(cout), jnp.ones(cout)))


def conv_bn(p, s, x, stride, eps=1e-5, momentum=0.1):
    w, gamma, beta = p
    y = lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    mean = y.mean((0, 1, 2))
    var = jnp.square(y - mean).mean((0, 1, 2))
    n = y.size // y.shape[-1]
    running = ((1 - momentum) * s[0] + momentum * mean,
               (1 - momentum) * s[1] + momentum * var * n / (n - 1))
    return (y - mean) * lax.rsqrt(var + eps) * gamma + beta, running


def resnet_blocks():
    """(cin, cout, stride) of each basic block."""
    cin, out = 16, []
    for cout, stride in ec.RESNET["stages"]:
        out.append((cin, cout, stride))
        cin = cout
    return out


def resnet_init(key):
    keys = iter(jax.random.split(key, 2 + 3 * len(ec.RESNET["stages"])))
    params, state = {"blocks": []}, {"blocks": []}
    params["stem"], state["stem"] = conv_bn_init(next(keys), 1, 16, 3)
    for cin, cout, stride in resnet_blocks():
        p, s = {}, {}
        p["a"], s["a"] = conv_bn_init(next(keys), cin, cout, 3)
        p["b"], s["b"] = conv_bn_init(next(keys), cout, cout, 3)
        if stride != 1 or cin != cout:
            p["shortcut"], s["shortcut"] = conv_bn_init(next(keys), cin, cout, 1)
        params["blocks"].append(p)
        state["blocks"].append(s)
    params["fc"] = linear(next(keys), 64, ec.RESNET["classes"])
    return params, state


def resnet_loss(p, state, images, labels):
    new = {"blocks": []}
    h, new["stem"] = conv_bn(p["stem"], state["stem"], images, 1)
    h = jax.nn.relu(h)
    for pb, sb, (_, _, stride) in zip(p["blocks"], state["blocks"], resnet_blocks()):
        ns = {}
        y, ns["a"] = conv_bn(pb["a"], sb["a"], h, stride)
        y, ns["b"] = conv_bn(pb["b"], sb["b"], jax.nn.relu(y), 1)
        if "shortcut" in pb:
            h, ns["shortcut"] = conv_bn(pb["shortcut"], sb["shortcut"], h, stride)
        h = jax.nn.relu(y + h)
        new["blocks"].append(ns)
    return cross_entropy(dense(p["fc"], h.mean((1, 2))), labels), new


def resnet_batch(key):
    kx, ky = jax.random.split(key)
    size = ec.RESNET["size"]
    return (jax.random.uniform(kx, (args.batch, size, size, 1), jnp.float32),
            jax.random.randint(ky, (args.batch,), 0, ec.RESNET["classes"]))


# --- the training step ---------------------------------------------------------------------------
MODELS = {"gpt": (gpt_init, gpt_loss, gpt_batch, ec.GPT["lr"]),
          "lstm": (lstm_init, lstm_loss, lstm_batch, ec.LSTM["lr"]),
          "resnet": (resnet_init, resnet_loss, resnet_batch, ec.RESNET["lr"])}
init, loss_fn, make_batch, LR = MODELS[args.model]


def adam(params, opt, grads):
    """torch.optim.Adam: m, v; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""
    t, m, v = opt
    t = t + 1
    m = jax.tree.map(lambda m, g: ec.BETA1 * m + (1 - ec.BETA1) * g, m, grads)
    v = jax.tree.map(lambda v, g: ec.BETA2 * v + (1 - ec.BETA2) * g * g, v, grads)
    n = t.astype(jnp.float32)
    c1, c2 = 1 - ec.BETA1 ** n, jnp.sqrt(1 - ec.BETA2 ** n)
    params = jax.tree.map(lambda p, m, v: p - LR / c1 * m / (jnp.sqrt(v) / c2 + ec.EPS),
                          params, m, v)
    return params, (t, m, v)


@functools.partial(jax.jit, donate_argnums=(0, 1, 2))
def train_step(params, opt, state, x, y):
    (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
    params, opt = adam(params, opt, grads)
    return params, opt, state, loss


key_params, key_batch = jax.random.split(jax.random.key(args.seed))
params, bn_state = init(key_params)
slots = (jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, params),
         jax.tree.map(jnp.zeros_like, params))
carry = [params, slots, bn_state]
x, y = make_batch(key_batch)


def step():
    carry[0], carry[1], carry[2], loss = train_step(*carry, x, y)
    return float(loss)


sys.exit(ec.run(step, "jax-jit", jax.__version__, args, devices=str(jax.devices())))
