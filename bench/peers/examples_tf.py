"""The example programs' training steps (examples/gpt, lstm, resnet) in TensorFlow 2 on the CPU,
each one tf.function (--mode graph) or one tf.function(jit_compile=True) (--mode xla): forward of
a Keras model, mean cross-entropy, tf.GradientTape gradients, Keras Adam's update (epsilon 1e-8,
PyTorch's); the loss is fetched to the host (float) every step.

    .deps/venv-tf/bin/python bench/peers/examples_tf.py --model gpt|lstm|resnet --mode graph|xla
        [--threads 2] [--steps 40] [--warmup 5] [--batch B]

The models are bench/gpt_step.py's, lstm_step.py's and resnet_step.py's PyTorch ones as Keras
layers (Keras' default initializations): GPT as a keras.Model of pre-norm blocks with one Dense
qkv layer and causal attention in tf ops (matmul, a lower-triangular mask, softmax); the LSTM
as keras.layers.LSTM(256, return_sequences=True) (a tf.while_loop on the CPU); the ResNet in
NHWC with Conv2D(padding="same", use_bias=False) and BatchNormalization(momentum 0.9, epsilon
1e-5: PyTorch's 0.1 and 1e-5) called with training=True. One fixed random batch. Threads: the
process is pinned to --threads CPUs before TensorFlow starts; intra-op --threads, inter-op 1 (as
train_step_tf.py). Prints one JSON line (examples_common.run); exits 1 when the loss did not
decrease."""
import math
import os
import sys

import examples_common as ec

args = ec.parse_args(["graph", "xla"])
ec.pin_cpus(args.threads)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
keras = tf.keras
keras.utils.set_random_seed(args.seed)
layers = keras.layers


# --- GPT -----------------------------------------------------------------------------------------
class GptBlock(layers.Layer):
    def __init__(self, width, heads, hidden):
        super().__init__()
        self.width, self.heads = width, heads
        self.ln1 = layers.LayerNormalization(epsilon=1e-5)
        self.qkv = layers.Dense(3 * width)
        self.proj = layers.Dense(width)
        self.ln2 = layers.LayerNormalization(epsilon=1e-5)
        self.fc = layers.Dense(hidden)
        self.out = layers.Dense(width)

    def call(self, h):
        t, d = h.shape[1], self.width // self.heads
        q, k, v = tf.split(self.qkv(self.ln1(h)), 3, axis=-1)
        q, k, v = (tf.transpose(tf.reshape(z, [-1, t, self.heads, d]), [0, 2, 1, 3])
                   for z in (q, k, v))  # [B, N, T, H]
        s = tf.matmul(q, k, transpose_b=True) / math.sqrt(d)
        causal = tf.linalg.band_part(tf.ones([t, t], tf.bool), -1, 0)
        a = tf.matmul(tf.nn.softmax(tf.where(causal, s, float("-inf"))), v)
        h = h + self.proj(tf.reshape(tf.transpose(a, [0, 2, 1, 3]), [-1, t, self.width]))
        return h + self.out(tf.nn.gelu(self.fc(self.ln2(h)), approximate=False))


class Gpt(keras.Model):
    def __init__(self, vocab, context, width, heads, hidden, blocks, lr=None):
        super().__init__()
        self.tok = layers.Embedding(vocab, width)
        self.pos = self.add_weight(shape=(context, width), name="pos",
                                   initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.blocks = [GptBlock(width, heads, hidden) for _ in range(blocks)]
        self.ln_f = layers.LayerNormalization(epsilon=1e-5)
        self.head = layers.Dense(vocab)

    def call(self, tokens, training=False):
        h = self.tok(tokens) + self.pos[:tokens.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def gpt_batch():
    shape = (args.batch, ec.GPT["context"])
    return (tf.random.uniform(shape, 0, ec.GPT["vocab"], tf.int32),
            tf.random.uniform(shape, 0, ec.GPT["vocab"], tf.int32))


# --- LSTM ----------------------------------------------------------------------------------------
def lstm_model():
    c = ec.LSTM
    return keras.Sequential([layers.Input((c["length"],), dtype="int32"),
                             layers.Embedding(c["vocab"], c["embed"]),
                             layers.LSTM(c["units"], return_sequences=True),
                             layers.Dense(c["vocab"])])


def lstm_batch():
    shape = (args.batch, ec.LSTM["length"])
    return (tf.random.uniform(shape, 0, ec.LSTM["vocab"], tf.int32),
            tf.random.uniform(shape, 0, ec.LSTM["vocab"], tf.int32))


# --- ResNet --------------------------------------------------------------------------------------
def conv_bn(filters, k, stride):
    return keras.Sequential([layers.Conv2D(filters, k, stride, padding="same", use_bias=False),
                             layers.BatchNormalization(momentum=0.9, epsilon=1e-5)])


class Block(layers.Layer):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cout, 3, stride)
        self.b = conv_bn(cout, 3, 1)
        self.shortcut = conv_bn(cout, 1, stride) if stride != 1 or cin != cout else None

    def call(self, x, training=False):
        y = self.b(tf.nn.relu(self.a(x, training=training)), training=training)
        return tf.nn.relu(y + (x if self.shortcut is None else self.shortcut(x, training=training)))


class ResNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(16, 3, 1)
        self.stages, cin = [], 16
        for cout, stride in ec.RESNET["stages"]:
            self.stages.append(Block(cin, cout, stride))
            cin = cout
        self.fc = layers.Dense(ec.RESNET["classes"])

    def call(self, images, training=False):
        h = tf.nn.relu(self.stem(images, training=training))
        for block in self.stages:
            h = block(h, training=training)
        return self.fc(tf.reduce_mean(h, axis=[1, 2]))


def resnet_batch():
    size = ec.RESNET["size"]
    return (tf.random.uniform((args.batch, size, size, 1)),
            tf.random.uniform((args.batch,), 0, ec.RESNET["classes"], tf.int32))


# --- the training step ---------------------------------------------------------------------------
MODELS = {"gpt": (lambda: Gpt(**ec.GPT), gpt_batch, ec.GPT["lr"]),
          "lstm": (lstm_model, lstm_batch, ec.LSTM["lr"]),
          "resnet": (ResNet, resnet_batch, ec.RESNET["lr"])}
make_model, make_batch, lr = MODELS[args.model]
model = make_model()
x, y = make_batch()
model(x)  # builds the variables outside the tf.function (XLA cannot create them)
opt = keras.optimizers.Adam(learning_rate=lr, beta_1=ec.BETA1, beta_2=ec.BETA2, epsilon=ec.EPS)
opt.build(model.trainable_variables)


@tf.function(jit_compile=args.mode == "xla")
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def step():
    return float(train_step(x, y))


sys.exit(ec.run(step, f"tf-{args.mode}", tf.__version__, args, keras=keras.__version__))
