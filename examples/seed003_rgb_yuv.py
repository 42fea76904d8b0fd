# ruff: noqa: UP031  (the seed's own %-formatting, kept as written)
"""Seed 003 (a TVM tutorial, "TVM笔记(1)"): RGB->YUV with a default schedule, then an AutoTVM
template tuned with RandomTuner and applied with apply_history_best.

    python examples/seed003_rgb_yuv.py [n_trial]      # n_trial defaults to the seed's 10

The seed's program with only its imports changed (``import tvm`` -> ``import scheduler_core as
tvm``), and two repairs it needs anywhere: ``rgb2y/u/v`` read the placeholder ``rgb``, which the
seed creates inside ``rgb_yuv_schedule``, so they are defined there; and the correctness check
adds ``atol=1e-6``, since u and v cancel to near zero and numpy's dot sums in another order
(differences of ~4e-8).  The GPU branch runs where ``target`` is set to "cuda" and a GPU is
attached (tuning refuses clearly otherwise).  It writes ``rgb2yuv.log`` in the current directory.
"""

import logging
import sys
import timeit

import numpy as np

import scheduler_core as tvm
from scheduler_core import autotvm, te

w = 1920
h = 1080
c = 3
target = 'llvm'
N_TRIAL = int(sys.argv[1]) if len(sys.argv) > 1 else 10


def rgb_yuv_schedule(w, h, c=3):
    rgb = te.placeholder((w, h, c), name='rgb')

    def rgb2y(i, j, k):
        return rgb[i, j, 0] * 0.257 + rgb[i, j, 1] * 0.504 + rgb[i, j, 2] * 0.098

    def rgb2u(i, j, k):
        return rgb[i, j, 0] * -0.148 + rgb[i, j, 1] * -0.291 + rgb[i, j, 2] * 0.439

    def rgb2v(i, j, k):
        return rgb[i, j, 0] * 0.439 + rgb[i, j, 1] * -0.368 + rgb[i, j, 2] * -0.071

    rgb2yuv = lambda i, j, k: te.if_then_else(k == 0, rgb2y(i, j, k), te.if_then_else(k == 1, rgb2u(i, j, k), rgb2v(i, j, k)))  # noqa: E731,E501
    yuv = te.compute((w, h, c), rgb2yuv, name='yuv')
    s = te.create_schedule(yuv.op)
    return s, [rgb, yuv]


def bench_workload(workload):
    workload(1)  # warmup
    time = workload(1)  # the time to run once
    if time > 1:
        return time
    # The number of repeats to measure at least 1 second
    num_repeats = max(int(1.0 / time), 5)
    return workload(num_repeats) / num_repeats


def bench_tvm_func(func, name='rgb2yuv'):
    a_np = np.random.uniform(size=(w, h, c)).astype(np.float32)
    b_np = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]]).astype(np.float32)
    c_np = a_np.dot(b_np)
    ctx = tvm.context(target, 0)
    a_tvm = tvm.nd.array(a_np, ctx=ctx)
    c_tvm = tvm.nd.empty(c_np.shape, ctx=ctx)
    func(a_tvm, c_tvm)
    tvm.testing.assert_allclose(c_np, c_tvm.asnumpy(), rtol=1e-3, atol=1e-6)

    def workload(nrepeats):
        evaluator = func.time_evaluator(func.entry_name, ctx, number=400)
        return evaluator(a_tvm, c_tvm).mean * nrepeats
    print('Time cost of this operator: %f' % bench_workload(workload))
    func.save('/tmp/%s.o' % name)


def default_schedule():
    s, (rgb, yuv) = rgb_yuv_schedule(w, h)
    if target == 'opencl' or target == 'cuda':
        bx, tx = s[yuv].split(yuv.op.axis[1], factor=64)
        s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
        s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
    func = tvm.build(s, [rgb, yuv], target=target, name='rgb2yuv')
    bench_tvm_func(func, name='rgb2yuv_default')


@autotvm.template("multimedia/rgb_yuv_trans")
def rgb_yuv_trans(w, h, c=3):
    s, (rgb, yuv) = rgb_yuv_schedule(w, h, c)
    x, y = yuv.op.axis[0], yuv.op.axis[1]
    cfg = autotvm.get_config()
    if target == 'opencl' or target == 'cuda':
        xy = s[yuv].fuse(x, y)
        #### define space begin ####
        cfg.define_split("xy_split", cfg.axis(x.dom.extent.value * y.dom.extent.value), num_outputs=2)
        #### define space end ####
        bx, tx = cfg["xy_split"].apply(s, yuv, xy)
        s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
        s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
        s[yuv].unroll(yuv.op.axis[2])
    else:
        #### define space begin ####
        cfg.define_split("tile_y", y, num_outputs=2)
        #### define space end ####
        yo, yi = cfg["tile_y"].apply(s, yuv, y)
        xy = s[yuv].fuse(x, yo)
        s[yuv].parallel(xy)
        s[yuv].vectorize(yi)
        s[yuv].unroll(yuv.op.axis[2])
    return s, [rgb, yuv]


def tune_task():
    task = autotvm.task.create("multimedia/rgb_yuv_trans", args=(w, h), target=target)
    print(task.config_space)
    measure_option = autotvm.measure_option(builder='local', runner=autotvm.LocalRunner(number=5))
    tuner = autotvm.tuner.RandomTuner(task)
    if 0:
        n_trial = len(task.config_space)
    else:
        n_trial = N_TRIAL
    tuner.tune(n_trial=n_trial, measure_option=measure_option, callbacks=[autotvm.callback.log_to_file('rgb2yuv.log')])


def evaluate_task():
    # apply history best from log file
    with autotvm.apply_history_best('rgb2yuv.log'):
        with tvm.target.create(target):
            s, arg_bufs = rgb_yuv_trans(w, h)
            func = tvm.build(s, arg_bufs, name='rgb2yuv')
    bench_tvm_func(func)


if __name__ == "__main__":
    default_schedule()
    timer = timeit.Timer(setup='import numpy as np\n'
                         'a_np = np.random.uniform(size=(%d, %d, %d)).astype(np.float32)\n'
                         'b_np = np.array([[0.257,-0.148,0.439],[0.504,-0.291,-0.368],[0.098,0.439,-0.071]]).astype(np.float32)' % (w, h, c),  # noqa: E501
                         stmt='c_np = a_np.dot(b_np)')
    print('time for np.dot((%d, %d)):' % (w, h), bench_workload(timer.timeit))
    logging.getLogger('autotvm').setLevel(logging.DEBUG)
    logging.getLogger('autotvm').addHandler(logging.StreamHandler(sys.stdout))
    tune_task()
    evaluate_task()
