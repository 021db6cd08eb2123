"""The three classes of holes to the real builtins, each closed at its root, several variants each.

(a) `type()` of objects the allowed modules hand out must not be a real class whose
constructor takes names; (b) no partial or wrapper whose public attributes reach a real
host function that takes names; (c) name checks must not trust `str` subclasses.
"""

from __future__ import annotations

import pytest

from sera.sandbox import SandboxSession

EVIL_STR = (
    "class S(str):\n"
    "    def startswith(self, *a):\n        return False\n"
    "    def __eq__(self, other):\n        return False\n"
    "    def __hash__(self):\n        return 1\n"
    "    def split(self, *a):\n        return ['real']\n"
    "    def __contains__(self, x):\n        return False\n"
    "    def __str__(self):\n        return 'real'\n"
    "n = S('__class__')\n"
)

TYPE_OF_HANDOUTS = [
    "import operator\nA = type(operator.attrgetter('x'))\nA('__class__')(1)",
    "import operator\nA = type(operator.attrgetter('x', 'y'))\nA('real.__class__')(1)",
    "import operator\nM = type(operator.methodcaller('x'))\nM('__subclasses__')(object)",
    "from operator import methodcaller\nM = type(methodcaller('upper'))\nM('__reduce_ex__', 2)(1)",
    "import operator\nI = type(operator.itemgetter(0))\nI('__class__')(1).__class__",
    "import operator\nA = type(type(operator.attrgetter('x')))\nA('X', (), {})",
    "import operator\nclass B(type(operator.attrgetter('x'))):\n    pass\nB('__globals__')(print)",
]

PARTIALS = [
    "import functools\nfunctools.wraps(print).func(print, print, updated=('__globals__',))",
    "import functools\nw = functools.wraps(print)\nw.args",
    "import functools\nw = functools.wraps(print)\nw.keywords",
    "import functools\ngetattr(functools.wraps(print), 'func')",
    "from functools import wraps\nf = wraps(len)\nf.func",
    "import functools\nfunctools.update_wrapper(print, len, ('__self__',))",
]

STR_SUBCLASS = [
    EVIL_STR + "getattr((), n)",
    EVIL_STR + "getattr((), n, None)",
    EVIL_STR + "hasattr((), n)",
    EVIL_STR + "class A:\n    pass\nsetattr(A, S('__getattr__'), print)",
    EVIL_STR + "class A:\n    pass\ndelattr(A, S('__doc__'))",
    EVIL_STR + "import operator\noperator.methodcaller(S('__subclasses__'))(object)",
    EVIL_STR + "import operator\noperator.attrgetter(n)(1)",
    EVIL_STR + "import operator\noperator.attrgetter('real', n)(1)",
]


async def _run(code: str):
    async with SandboxSession({}, timeout_s=2) as session:
        result = await session.run(code)
        follow_up = await session.run("print(6 * 7)")
    assert follow_up.stdout == "42\n"
    return result


@pytest.mark.parametrize("code", TYPE_OF_HANDOUTS)
async def test_type_of_a_handout_is_the_sandbox_class(code: str) -> None:
    result = await _run(code)
    assert result.error_kind in ("exception", "policy"), result
    assert any(kind in result.error for kind in ("AttributeError", "TypeError", "not allowed")), result.error


@pytest.mark.parametrize("code", PARTIALS)
async def test_no_partial_reaches_the_real_update_wrapper(code: str) -> None:
    result = await _run(code)
    assert result.error_kind in ("exception", "policy"), result
    assert "AttributeError" in result.error or "TypeError" in result.error or "not allowed" in result.error


@pytest.mark.parametrize("code", STR_SUBCLASS)
async def test_str_subclasses_never_pass_a_name_check(code: str) -> None:
    result = await _run(code)
    assert result.error_kind == "exception", result
    assert "TypeError: attribute name must be a str, not S" in result.error, result.error


async def test_the_reimplementations_behave_like_operator() -> None:
    code = (
        "import operator, functools\n"
        "print(operator.attrgetter('real', 'imag')(3), operator.attrgetter('real.real')(2))\n"
        "print(operator.itemgetter(1)('ab'), operator.itemgetter(0, 2)('abc'))\n"
        "print(operator.methodcaller('split', ',', maxsplit=1)('a,b,c'))\n"
        "def inner():\n    'doc'\n"
        "@functools.wraps(inner)\ndef outer():\n    pass\n"
        "print(outer.__name__, outer.__doc__, sorted([(2, 'b'), (1, 'a')], key=operator.itemgetter(0)))"
    )
    result = await _run(code)
    assert result.ok, result.error
    assert result.stdout == "(3, 0) 2\nb ('a', 'c')\n['a', 'b,c']\ninner doc [(1, 'a'), (2, 'b')]\n"
