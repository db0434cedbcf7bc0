"""The seed model's training step in JAX on the CPU, one jax.jit'd function: forward, loss
(cross-entropy + weight decay), gradients, Momentum 0.9 Nesterov update (TensorFlow's formula),
parameters and slots donated. Threads: the process is pinned to --threads CPUs before JAX starts
(XLA's CPU client sizes its pool from the affinity mask). Prints one JSON line (common.emit), or
serves bench/run's race (--serve)."""
import common

args = common.parse_args(["jit"])
common.pin_cpus(args.threads)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

SHAPES = {"conv1": ((5, 5, 1, 32), 5e-2, 0.0), "conv2": ((5, 5, 32, 64), 5e-2, 0.1),
          "local3": ((7 * 7 * 64, 1024), 0.04, 0.1), "local4": ((1024, 10), 0.04, 0.1),
          "softmax_linear": ((10, 10), 1 / 192, 0.0)}


def init(key):
    params = {}
    for (name, (shape, std, bias)), k in zip(SHAPES.items(), jax.random.split(key, len(SHAPES))):
        w = std * jax.random.truncated_normal(k, -2.0, 2.0, shape, jnp.float32)
        params[name] = (w, jnp.full(shape[-1], bias, jnp.float32))
    return params


def conv_pool(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y + b)
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")


def loss_fn(p, x, y):
    h = conv_pool(conv_pool(x, *p["conv1"]), *p["conv2"]).reshape(x.shape[0], -1)
    h = jax.nn.relu(h @ p["local3"][0] + p["local3"][1])
    h = jax.nn.relu(h @ p["local4"][0] + p["local4"][1])
    logits = h @ p["softmax_linear"][0] + p["softmax_linear"][1]
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1).mean()
    l2 = (jnp.sum(p["local3"][0] ** 2) + jnp.sum(p["local4"][0] ** 2)) / 2
    return ce + common.WEIGHT_DECAY * l2


@jax.jit(donate_argnums=(0, 1))
def train_step(p, m, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    m = jax.tree.map(lambda a, g: common.MOMENTUM * a + g, m, g)
    p = jax.tree.map(lambda v, g, a: v - common.LR * (g + common.MOMENTUM * a), p, g, m)
    return p, m, loss


images, labels = common.batch()
x = jnp.asarray(images, jnp.float32).reshape(common.BATCH, 28, 28, 1)
y = jnp.asarray(labels, jnp.int32)
state = [init(jax.random.key(0))]
state.append(jax.tree.map(jnp.zeros_like, state[0]))


def step():
    state[0], state[1], loss = train_step(state[0], state[1], x, y)
    return float(loss)


check = common.sanity(step)
common.finish(args, step, "jax-jit", jax.__version__, check, threads=args.threads,
              devices=str(jax.devices()))
