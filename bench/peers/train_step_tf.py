"""The seed model's training step in TensorFlow 2 on the CPU, one tf.function (graph mode) or
one tf.function(jit_compile=True) (XLA): forward, loss (cross-entropy + tf.nn.l2_loss weight
decay), tf.GradientTape gradients, Momentum 0.9 Nesterov update (TensorFlow's formula) of the
variables. Threads: intra-op --threads, inter-op 1. Prints one JSON line (common.emit), or serves
bench/run's race (--serve)."""
import os

import common

args = common.parse_args(["graph", "xla"])
common.pin_cpus(args.threads)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.random.set_seed(0)

LAYERS = [((5, 5, 1, 32), 5e-2, 0.0), ((5, 5, 32, 64), 5e-2, 0.1), ((7 * 7 * 64, 1024), 0.04, 0.1),
          ((1024, 10), 0.04, 0.1), ((10, 10), 1 / 192, 0.0)]
params = []
for shape, std, bias in LAYERS:
    params += [tf.Variable(tf.random.truncated_normal(shape, stddev=std)),
               tf.Variable(tf.fill([shape[-1]], bias))]
slots = [tf.Variable(tf.zeros_like(v)) for v in params]


def loss_fn(x, y):
    w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
    h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME") + b1), 2, 2, "SAME")
    h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, w2, 1, "SAME") + b2), 2, 2, "SAME")
    h = tf.nn.relu(tf.reshape(h, [-1, 7 * 7 * 64]) @ w3 + b3)
    logits = tf.nn.relu(h @ w4 + b4) @ w5 + b5
    ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return ce + common.WEIGHT_DECAY * (tf.nn.l2_loss(w3) + tf.nn.l2_loss(w4))


@tf.function(jit_compile=args.mode == "xla")
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(x, y)
    for v, a, g in zip(params, slots, tape.gradient(loss, params)):
        a.assign(common.MOMENTUM * a + g)
        v.assign_sub(common.LR * (g + common.MOMENTUM * a))
    return loss


images, labels = common.batch()
x = tf.reshape(tf.constant(images, tf.float32), [common.BATCH, 28, 28, 1])
y = tf.constant(labels, tf.int32)


def step():
    return float(train_step(x, y))


check = common.sanity(step)
common.finish(args, step, f"tf-{args.mode}", tf.__version__, check, threads=args.threads)
