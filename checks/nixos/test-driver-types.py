# Type hints for type-checking the VM test's Python (checks/nixos/install.nix) with mypy
# where the NixOS test driver is not installed. The driver does the same before a VM test
# runs (nixos/lib/testing/driver.nix): it prepends nixos/lib/test-script-prepend.py and
# one `name: QemuMachine` line per node, then runs
#   mypy --no-implicit-optional --pretty --no-color-output testScriptWithTypes
# and a type error fails the test's build. The globals below are those of
# test-script-prepend.py; the class has the signatures of the methods the test calls, from
# nixos/lib/test-driver/src/test_driver/machine/__init__.py (BaseMachine, QemuMachine).
# checks/nix-checks.sh appends `machine: QemuMachine` and the rendered script.
from typing import Callable, ContextManager, List, Optional


class QemuMachine:
    name: str

    def execute(
        self,
        command: str,
        check_return: bool = True,
        check_output: bool = True,
        timeout: Optional[int] = 900,
    ) -> tuple[int, str]:
        raise Exception("This is just type information for the Nix test driver")

    def succeed(self, *commands: str, timeout: Optional[int] = None) -> str:
        raise Exception("This is just type information for the Nix test driver")

    def fail(self, *commands: str, timeout: Optional[int] = None) -> str:
        raise Exception("This is just type information for the Nix test driver")

    def wait_until_succeeds(self, command: str, timeout: int = 900) -> str:
        raise Exception("This is just type information for the Nix test driver")

    def wait_for_unit(self, unit: str, user: Optional[str] = None, timeout: int = 900) -> None:
        raise Exception("This is just type information for the Nix test driver")

    def start(self, allow_reboot: bool = False) -> None:
        raise Exception("This is just type information for the Nix test driver")

    def shutdown(self) -> None:
        raise Exception("This is just type information for the Nix test driver")

    def crash(self) -> None:
        raise Exception("This is just type information for the Nix test driver")


start_all: Callable[[], None]
subtest: Callable[[str], ContextManager[None]]
machines: List[QemuMachine]
